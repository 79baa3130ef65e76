"""repro_py: deploy, sweep, benchmark and report SGLang DFlash + DDTree speculative decoding."""

__version__ = "0.1.0"
