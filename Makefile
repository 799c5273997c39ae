# Two commands do all the set-up on a fresh clone:
#   make run    compile + run the main job with its per-layer profile
#   make test   the lint (ruff) and the default test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install run lint test test-all bench clean

$(STAMP): requirements-dev.txt pyproject.toml $(wildcard backends/*/pyproject.toml)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

# The main job: yolov5s (640x640) compiled for ZG330 (cached in .icraft/cache) and run on the
# simulated chip, with its per-layer profile, a Perfetto trace and a plot of the layer times.
run: $(STAMP)
	mkdir -p out
	$(PY) -m xrt run yolov5s --target zg330 --backends "ZG330,sim://zg330;Host" --profile --repeat 2 \
		--trace out/yolov5s_zg330_trace.json --plot out/yolov5s_zg330_profile.png

lint: $(STAMP)
	$(PY) -m ruff check .

test: lint
	$(PY) -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

bench: $(STAMP)
	$(PY) -m pytest benchmarks -q --benchmark-only

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
