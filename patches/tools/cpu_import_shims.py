"""Import-time stand-in for torchvision in the CPU sglang venv.

``sglang.srt.configs`` imports every model config at package import, and a
few vision-language ones import torchvision at module level. torchvision has
no build for torch 2.13.0 CPU (the venv's torch; sglang 0.5.23 wants 2.14.1),
so ``sglang.srt.managers.schedule_batch`` / ``mem_cache.memory_pool`` cannot
be imported without this. The stand-in satisfies those imports only: any
call into it raises, so nothing can silently use it. Installed only when the
real torchvision is absent, and only after transformers has recorded that
torchvision is unavailable (it reads the package metadata, which a stand-in
has not).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

_MODULES = (
    "torchvision",
    "torchvision.io",
    "torchvision.ops",
    "torchvision.transforms",
    "torchvision.transforms.functional",
    "torchvision.transforms.v2",
    "torchvision.transforms.v2.functional",
)


class _Absent:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Absent:
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name}: torchvision is not installed (CPU sglang venv import stand-in)")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(f"{self.__name__}.{attr}")


def install_torchvision_stand_in() -> bool:
    """Install the stand-in if torchvision is missing; return whether it was installed."""
    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return False
    try:
        from transformers.utils import import_utils  # noqa: PLC0415 -- optional, only when present
    except ImportError:
        pass
    else:
        import_utils.is_torchvision_available()  # cache "unavailable" before the stand-in exists
    for name in _MODULES:
        module = _Module(name)
        module.__path__ = []
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    return True
