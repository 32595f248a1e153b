"""`compiling.contained`: tune's compiled code with its compile errors kept in its calls.

What it sets is global to torch (dynamo's and AOT autograd's configuration), so the
property is that each call sets it only for itself and puts back what the script had,
whatever the script had and whether or not the call raised, its listener to dynamo's log
removed. The fallbacks it enables are tested through the doors (a new shape's backward
that fails to compile: test_tune.py, the Lightning and Hugging Face tests)."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from accelkit.torch.tuning.compiling import contained

functorch: Any = importlib.import_module("torch._functorch.config")
LOWERING = "force_non_lazy_backward_lowering"


class Raised(Exception):
    pass


@pytest.mark.skipif(not hasattr(functorch, LOWERING), reason=f"this torch has no {LOWERING}")
@given(suppress=st.booleans(), lowering=st.booleans(), strict=st.booleans(), raises=st.booleans())
@settings(deadline=None)  # the first call imports dynamo's configuration
def test_a_call_sets_the_compile_settings_for_itself_and_puts_back_the_scripts(
    suppress: bool, lowering: bool, strict: bool, raises: bool
) -> None:
    dynamo, seen = torch._dynamo.config, []
    dynamo_log = logging.getLogger("torch._dynamo.convert_frame")
    handlers = list(dynamo_log.handlers)

    def compiled() -> None:
        seen.append((dynamo.suppress_errors, getattr(functorch, LOWERING)))
        if raises:
            raise Raised

    with dynamo.patch(suppress_errors=suppress), functorch.patch(**{LOWERING: lowering}):
        call = contained(torch, compiled, strict=lambda: strict)
        try:
            call()
        except Raised:
            assert raises
        assert seen == [(not strict, True)]  # errors raise only while strict
        assert (dynamo.suppress_errors, getattr(functorch, LOWERING)) == (suppress, lowering)
        assert dynamo_log.handlers == handlers  # the fallbacks' listener is gone too
