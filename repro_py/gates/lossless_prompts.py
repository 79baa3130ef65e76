"""The losslessness gate's fixed prompts: mixed lengths, and groups that share part of a prefix.

Requests that share a prefix meet in sglang's radix cache: a later one reuses the KV of the
part it has in common with an earlier one and computes only the rest, so prefix matching,
the split of a cached node and the draft over a reused prefix are all on the path.
``SHARED`` opens four prompts (one of them is ``SHARED`` alone, a strict prefix of the
others), ``SHARED[:HALF]`` opens one more, and two prompts share only their first words
with another prompt.
"""

from __future__ import annotations

SHARED = (
    "You are reviewing a pull request for a small inventory service written in Python. The service keeps "
    "items in a SQLite table with the columns id, name, quantity and price, exposes them over a JSON HTTP "
    "API, and runs behind a reverse proxy that terminates TLS. The change under review adds an endpoint "
    "that imports many items at once from an uploaded CSV file."
)
HALF = SHARED.index(" exposes them")

PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "The capital city of France is"),
    ("sort", "Write a Python function that sorts a list of integers using merge sort, and explain each step."),
    ("story", "Once upon a time, in a village at the edge of a great forest, there lived a clockmaker who"),
    ("math", "Compute 17 * 23 step by step, showing every intermediate product and sum."),
    ("list", "List the first twenty prime numbers, one per line, each followed by its square."),
    ("json", 'Return a JSON object describing a book with the keys "title", "author", "year" and "tags".'),
    ("hi", "Hi"),
    ("color", "Name a color."),
    ("haiku", "Write a haiku about autumn rain."),
    ("define", "Define entropy in one sentence."),
    ("translate", "Translate into German: The train leaves at seven in the morning and arrives before noon."),
    ("sql", "Write an SQL query that returns the ten customers with the highest total order value in 2024."),
    ("regex", "Explain what the regular expression ^[A-Z][a-z]+(?: [A-Z][a-z]+)*$ matches, with three examples."),
    ("recipe", "Give a recipe for a simple tomato soup: ingredients with quantities first, then numbered steps."),
    ("compare", "Compare TCP and UDP in a table with rows for ordering, reliability, overhead and typical uses."),
    ("bug", "Find the bug: def mean(xs): return sum(xs) / len(xs) - 1. Explain it and give a corrected version."),
    ("letter", (
        "Write a short, polite letter to a landlord asking for the heating to be repaired. Mention that it "
        "stopped working three days ago, that the temperature inside has dropped below sixteen degrees, and "
        "that you are available on weekday mornings for a technician to visit."
    )),
    ("summary", (
        "Summarize the following in two sentences. The committee met on Tuesday to review the annual budget. "
        "After a long discussion about maintenance costs, members agreed to postpone the new library wing by "
        "one year and to spend the savings on repairing the roof of the existing building, which has leaked "
        "during every heavy storm since last winter. A public meeting will present the plan next month."
    )),
    ("proof", "Prove that the square root of 2 is irrational, step by step."),
    ("plan", (
        "I have three days in Rome in early spring, I like history and food, and I do not want to spend more "
        "than two hours a day in museums. Make a day-by-day plan with morning, afternoon and evening."
    )),
    ("code_review", (
        "Review this function and suggest improvements:\n\n"
        "def load(path):\n    f = open(path)\n    data = f.read()\n    items = []\n"
        "    for line in data.split('\\n'):\n        if line != '':\n            items.append(line.strip())\n"
        "    return items\n"
    )),
    ("numbers", "Count from one to thirty in words, separated by commas."),
    ("physics", "Why is the sky blue? Answer for a ten-year-old, then for a physics student."),
    ("capital_de", "The capital city of Germany is"),
    ("shared_alone", SHARED),
    ("shared_risks", SHARED + " List the three biggest risks of this change, most serious first."),
    ("shared_tests", SHARED + " Which five tests would you ask the author to add before merging?"),
    ("shared_notes", SHARED + " Summarize the change for the release notes in two sentences."),
    ("shared_half", SHARED[:HALF] + ". Write the SQL statement that creates this table, with sensible types."),
    ("story_dragon", "Once upon a time, in a village at the edge of a great forest, there lived a dragon who"),
    ("dialog", (
        "Continue this dialogue for six more lines.\nA: Did you lock the door?\nB: I thought you did.\n"
        "A: I was carrying the bags.\nB:"
    )),
)
