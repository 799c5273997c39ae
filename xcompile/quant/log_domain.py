"""The 16-bit rule of a log-power spectrum's chain (docs/quantization.md section 8, "Log-power
spectra").

The optimize stage writes ``log(max(re*re + im*im, c))`` in the log domain
(`xcompile.passes.log_power`): magnitudes, their Max / Min, Log tables, a Softplus table and
Adds, each op tagged ``decomposed = "LogPower"``. Those ops compute in 16 bits: their inputs,
the STFT's real and imaginary parts, then hold 4.5 decades of magnitude (a step of 0.002 on
parts of +-35, DNSMOS), and the Log tables read 32767 codes instead of 127, whose smallest
steps (log 1 -> log 2) are 0.69 apart. The ops are elementwise: no MAC moves to 16 bits (the
STFT's convolutions still compute in 8, writing 16-bit outputs)."""

from __future__ import annotations

from xir.network import Network

#: the tag value of the ops `xcompile.passes.log_power` writes
LOG_POWER = "LogPower"


def log_domain_bits(net: Network, int_ops: set[int], bits: int) -> dict[int, int]:
    """`{op_id: 16}` for the integer ops of `net` (optimized) that compute a log-power chain;
    empty at `bits` 16, where everything is 16-bit already."""
    if bits != 8:
        return {}
    return {op.op_id: 16 for op in net.ops
            if op.op_id in int_ops and op.tags.get("decomposed") == LOG_POWER}
