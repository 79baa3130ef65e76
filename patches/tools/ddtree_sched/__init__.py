"""The DDTree scheduler-path replay on CPU: SGLang's Scheduler and the patched
DFlashWorkerV2 on stand-in model runners (see replay.py)."""
