# The conformance kit as a pytest plugin: each check of the xrt backend contract becomes one test
# item of this suite (see tests/test_contract.py).
pytest_plugins = ["xrt.testing.pytest_plugin"]
