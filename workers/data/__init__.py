"""Tasks and datasets: built-in synthetic tasks and JSONL files of {prompt, answer}."""

from .tasks import Example, Task, arithmetic_examples, load_task, read_jsonl, reverse_examples

__all__ = ["Example", "Task", "arithmetic_examples", "load_task", "read_jsonl", "reverse_examples"]
