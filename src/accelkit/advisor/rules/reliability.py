"""Reliability: a long run on memory without ECC.

Without ECC a bit flip in device memory goes undetected and can corrupt
weights silently or crash the run; GeForce cards have no ECC and datacenter
cards can have it turned off. The longer the run, the likelier one is.
"""

from __future__ import annotations

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity

LONG_S = 3600.0


@needs(
    "gpu",
    "measured_here",
    "fact:run_seconds",
    optional=("spec",),
    evidence={"gpu": None, "ecc_enabled": None, "run_hours": None, "segment": "spec"},
)
def no_ecc(ctx: Context) -> Advice | None:
    """Fires on a run of an hour or more on a GPU whose memory has no ECC.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("RTX 4090")
        >>> ctx = Context.build(hw, None, {"device": "cuda:0", "hardware": hw.to_dict(),
        ...                                "facts": {"run_seconds": 7200}})
        >>> no_ecc(ctx).id
        'no_ecc'
    """
    gpu, spec = ctx.gpu, ctx.spec
    seconds = ctx.fact("run_seconds")
    if gpu is None or not ctx.measured_here:  # run_seconds were measured elsewhere
        return None
    ecc = gpu.ecc_enabled if gpu.ecc_enabled is not None else (spec.ecc if spec else None)
    if ecc is not False or seconds is None or seconds < LONG_S:
        return None
    return Advice(
        id="no_ecc",
        severity=Severity.INFO,
        title=(
            f"a {seconds / 3600:.1f} h run on {gpu.name} without ECC memory: an undetected "
            "bit flip can corrupt the weights or end the run"
        ),
        evidence={
            "gpu": gpu.name,
            "ecc_enabled": False,
            "run_hours": round(seconds / 3600, 2),
            **({"segment": spec.segment} if spec else {}),
        },
        action=ctx.pick(
            torch="checkpoint every 15-30 min: torch.save({'model': model.state_dict(), "
            "'optimizer': optimizer.state_dict(), 'step': step}, path), and watch the "
            "loss for sudden spikes",
            tensorflow="checkpoint often: keras.callbacks.BackupAndRestore(backup_dir, "
            "save_freq=1000) resumes after a crash; ModelCheckpoint keeps weights",
        ),
        expected_gain="no speed-up: bounds the work lost to a fault to one checkpoint interval",
    )
