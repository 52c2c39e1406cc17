"""Hugging Face transformers models through torch.export as the library itself exports them: its
exporter registers the cache classes (DynamicCache, EncoderDecoderCache) as pytrees, patches what
tracing cannot follow, and fixes the output flags (`use_cache`, `return_dict`, ...) as settings
of the trace instead of inputs. `NamedCall` binds a later call the way the model's forward does."""
from __future__ import annotations

import contextlib
import inspect
import logging
import sys
from dataclasses import dataclass
from typing import Any, Sequence


def is_pretrained(model: Any) -> bool:
    """Whether `model` is a transformers PreTrainedModel (without importing transformers)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


@dataclass(frozen=True)
class NamedCall:
    """How a call of a transformers model reaches its exported program: arguments bound to the
    forward's parameter names (positional ones too, as the model binds them), and the settings the
    export fixed (the output flags it took out of the inputs) checked equal to the call's."""

    signature: inspect.Signature
    settings: dict[str, Any]

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, the fixed settings checked and left out."""
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"the optimized model takes its forward's arguments: {err}") from None
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            named.update(value if kind is inspect.Parameter.VAR_KEYWORD else {name: value})
        for name, fixed in self.settings.items():
            given = named.pop(name, _MISSING)
            if given is _MISSING or given != fixed:
                shown = "left out" if given is _MISSING else repr(given)
                raise TypeError(f"the model was optimized with {name}={fixed!r} (a setting of the captured "
                                f"program, not an input); this call has it {shown}: optimize it again for that")
        return named

    def default(self, name: str) -> Any:
        """The forward's default for `name` (None for what it takes through **kwargs)."""
        parameter = self.signature.parameters.get(name)
        return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


_MISSING = object()


def export_pretrained(model: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, NamedCall]:
    """The ExportedProgram of a transformers model called with `args` and `kwargs` (by its
    library's exporter, static shapes), and how later calls bind to it."""
    from transformers.exporters import DynamoConfig, DynamoExporter

    signature = inspect.signature(model.forward)
    call = NamedCall(signature, {})
    named = call.bind(args, kwargs)
    given = dict(named)
    with _quiet_exporter():
        exported, _ = DynamoExporter().export_program(model, named, DynamoConfig())
    # what the exporter took out of the inputs became settings of the program
    settings = {k: v for k, v in given.items() if k not in named}
    return exported, NamedCall(signature, settings)


@contextlib.contextmanager
def _quiet_exporter():
    """The exporter warns on every export that it is experimental and names torch versions; the
    export's own errors still raise."""
    logger = logging.getLogger("transformers.exporters")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
