"""The drafter's training text (issue 15), all of it on this machine offline, none of it from the
test set:

* **plain text**: the Python standard library's own source files (code, comments and
  documentation strings) of the interpreter that runs this, cut into windows of tokens;
* **prompts written for this purpose** (:func:`prompts`): programming, explanation, arithmetic
  reasoning, tool-call, table and summarisation requests made from templates and the standard
  library's module names and documentation strings; the target's greedy replies to them are the
  text the drafter most needs to predict.

:func:`overlap_report` checks that no 50-character span of any row of the six sources of the
test set (the published test set's files and the vendored source files under ``data/sources``,
rows the test set does not use included) occurs in the training text, and which documents had
one (they are dropped before capture).
"""

from __future__ import annotations

import hashlib
import json
import random
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SPAN = 50  # characters: the disjointness span


@dataclass(frozen=True)
class Document:
    """One training text: ``kind`` ``stdlib`` (plain text) or ``prompt`` (a user message whose
    greedy reply is captured with it)."""

    name: str
    kind: str
    text: str


# ---------------------------------------------------------------------------------------------
# Plain text: the standard library


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's top-level and package ``.py`` files, tests and the interpreter's
    site-packages left out, sorted."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__", "turtledemo")
    out = [p for p in root.rglob("*.py")
           if not any(part in skip for part in p.relative_to(root).parts)]
    return sorted(out)


def stdlib_documents(n_chars: int, seed: int, root: Path | None = None) -> list[Document]:
    """About ``n_chars`` characters of standard-library source, whole files in a seeded order
    (long files cut to 12,000 characters)."""
    files = stdlib_files(root)
    random.Random(seed).shuffle(files)
    docs, total = [], 0
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        text = text[:12000]
        if len(text) < 400:
            continue
        docs.append(Document(f"stdlib:{p.name}", "stdlib", text))
        total += len(text)
        if total >= n_chars:
            break
    return docs


def docstrings(n: int, seed: int, root: Path | None = None) -> list[tuple[str, str]]:
    """``n`` (module, documentation string) pairs of standard-library modules, seeded."""
    import ast

    out = []
    files = stdlib_files(root)
    random.Random(seed + 1).shuffle(files)
    for p in files:
        try:
            doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        if doc and 300 <= len(doc) <= 6000:
            out.append((p.stem, doc))
        if len(out) >= n:
            break
    return out


# ---------------------------------------------------------------------------------------------
# Prompts written for this purpose

_TASKS = [
    "Write a Python function that {x}. Include a docstring and a short example of its use.",
    "Implement {x} in JavaScript, then explain the time complexity.",
    "Write a Go function that {x}, with a table-driven test.",
    "Show a Bash one-liner or short script that {x}, and explain each part.",
    "Write a SQL query over a table orders(id, customer, amount, created_at) that {y}.",
    "Refactor this idea into clean, typed Python: a class that {x}.",
    "What is a common bug when code {x}? Show the buggy version and the fix.",
    "Write unit tests with pytest for a function that {x}.",
    "Write a {lang} function that {x}. Explain your approach briefly.",
    "How would you write a {lang} program that {x}? Give the code and a usage example.",
    "Write {lang} code that {x}, handling edge cases, and list the edge cases you handled.",
]
_ACTIONS = [
    "parses an ISO 8601 date string and returns the weekday", "merges two sorted lists",
    "counts word frequencies in a text file", "removes duplicates while keeping order",
    "validates an email address with a regular expression", "flattens a nested list",
    "computes a moving average over a window", "reads a CSV file and sums one column",
    "retries a network call with exponential backoff", "finds the longest common prefix",
    "converts Roman numerals to integers", "groups records by a key", "checks balanced brackets",
    "walks a directory tree and lists the largest files", "caches results of a slow function",
    "splits a list into chunks of n items", "serialises a dataclass to JSON",
    "computes the Levenshtein distance", "rotates a matrix by 90 degrees",
    "implements binary search on a sorted array", "parses command-line arguments",
    "implements an LRU cache", "tokenises an arithmetic expression",
    "schedules tasks by priority with a heap", "formats a byte count as KB, MB or GB",
    "checks whether two strings are anagrams", "transposes a matrix given as nested lists",
    "computes the n-th prime number", "converts snake_case names to camelCase",
    "parses a query string into a dictionary", "finds all permutations of a short string",
    "merges overlapping intervals", "computes the median of a stream of numbers",
    "validates a Sudoku board", "counts the islands in a grid of 0s and 1s",
    "encodes a string with run-length encoding", "finds the shortest path in a small graph",
    "renders a list of records as a Markdown table", "debounces calls to a callback",
    "reads environment variables with defaults and type conversion",
    "generates a random password with given character classes", "deep-merges two dictionaries",
    "computes the greatest common divisor of a list of integers",
    "detects a cycle in a linked list", "paginates a list of items",
]
_LANGS = ["Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C++", "C#", "Ruby",
          "Kotlin"]
_SQL = [
    "returns each customer's total spend in 2023", "finds the top 3 customers by order count",
    "computes monthly revenue", "lists customers with no orders in the last 90 days",
    "returns the running total of amount per customer", "finds duplicate orders",
]
_EXPLAIN = [
    "Explain how {m} works in Python's standard library, with a small example.",
    "When would you use the {m} module instead of writing the code yourself?",
    "Give three practical tips for using {m} correctly.",
]
_CHAT = [
    "What are the main differences between a process and a thread?",
    "How does HTTPS keep a connection private? Keep it short.",
    "Give me a plan to learn linear algebra in eight weeks.",
    "What is the difference between latency and throughput?",
    "Explain big-O notation to a new programmer.",
    "Why do floating-point numbers sometimes give surprising results?",
    "Write a short, polite email asking a colleague to review a pull request.",
    "Summarise the pros and cons of remote work in a bulleted list.",
    "How do I choose between a list and a dictionary in Python?",
    "What does a garbage collector do?",
    "Describe how a hash table handles collisions.",
    "Give a recipe for a simple vegetable soup.",
    "What is the water cycle? Explain it for a ten-year-old.",
    "Write a haiku about compilers.",
    "What should I check before deploying a web service to production?",
    "Explain what a race condition is, with an everyday analogy.",
]
_WRITE = [
    "Write a short story of about 200 words about {t}.",
    "Write a persuasive paragraph arguing that {t} matters.",
    "Write a product description for {t}.",
    "Write a limerick about {t}.",
    "Pretend you are a tour guide and describe {t} to visitors.",
    "Write a blog post introduction about {t}, with a catchy title.",
    "Give five creative ideas related to {t}, one sentence each.",
    "Write a dialogue between two friends discussing {t}.",
]
_TOPICS = [
    "a lighthouse keeper who finds a message in a bottle", "learning to play the violin",
    "a city powered entirely by solar energy", "an old bookshop on a rainy day",
    "a robot that wants to become a gardener", "the first day at a new job",
    "a reusable water bottle that tracks hydration", "a mountain village in winter",
    "the history of the printing press", "a friendly dragon who is afraid of the dark",
    "urban beekeeping", "a smart umbrella", "a train journey across a desert",
    "volunteering at an animal shelter", "a museum of forgotten inventions",
]
_EXPLAIN_TOPICS = [
    "photosynthesis", "inflation", "the Pythagorean theorem", "how vaccines work",
    "supply and demand", "the causes of the First World War", "plate tectonics",
    "how a compiler works", "compound interest", "the greenhouse effect", "natural selection",
    "how the internet routes packets", "the French Revolution", "entropy", "Newton's laws",
    "the difference between weather and climate", "how credit scores work",
    "the structure of DNA", "public-key cryptography", "the Renaissance",
]
_AUDIENCES = ["a ten-year-old", "a high-school student", "a busy executive", "an expert",
              "someone who has never heard of it"]
_SENTENCES = [
    "The meeting has been moved to Thursday afternoon.",
    "Please remember to water the plants while I am away.",
    "Our new library opens next month with a larger children's section.",
    "I would like to book a table for four people at eight o'clock.",
    "The train was delayed because of heavy snow on the tracks.",
    "Thank you for your help with the project; it made a big difference.",
]
_LANG_NAMES = ["French", "German", "Spanish", "Italian", "Portuguese", "Chinese", "Japanese"]
_REASON = [
    "Alice is older than Bob, and Bob is older than Carol. Who is the youngest? Explain.",
    "If all bloops are razzies and all razzies are lazzies, are all bloops lazzies? Why?",
    "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much "
    "does the ball cost? Reason carefully.",
    "Three boxes are labelled apples, oranges and mixed, and every label is wrong. You may "
    "take one fruit from one box. How do you relabel them?",
    "A farmer has {a} sheep and all but {b} run away. How many are left? Explain.",
    "What is the next number in the sequence {a}, {c}, {d}, ...? Explain the pattern.",
]
_TOOLS = [
    ("get_weather", "city: string, unit: 'C' or 'F'", "What's the weather in {c} in Celsius?"),
    ("convert_currency", "amount: number, from: string, to: string",
     "Convert 250 {f} to {t}, please."),
    ("search_flights", "origin: string, destination: string, date: string",
     "Find me flights from {c} to {d} on 2025-03-14."),
    ("get_stock_price", "symbol: string", "How is {s} trading right now?"),
]
_CITIES = ["Lisbon", "Nairobi", "Osaka", "Montreal", "Lima", "Krakow", "Perth", "Tunis"]
_CUR = ["EUR", "USD", "JPY", "GBP", "CHF", "INR"]
_SYMBOLS = ["ACME", "GLOBX", "INITECH", "UMBRL", "SOYLNT"]


def _math_prompt(rng: random.Random) -> str:
    a, b, c = rng.randint(3, 60), rng.randint(2, 12), rng.randint(5, 95)
    kinds = [
        f"A shop sells pencils at {b} cents each. Mia buys {a} pencils and pays with a "
        f"{c}-dollar bill. How much change does she get? Reason step by step.",
        f"A train travels {a * 10} km in {b} hours. At the same speed, how far does it go in "
        f"{c} minutes? Show your work.",
        f"If {a}% of a class of {b * 10} students passed, how many failed? Explain.",
        f"Solve for x: {a}x + {b} = {c * 3}. Show each step.",
    ]
    return rng.choice(kinds)


def _table_prompt(rng: random.Random) -> str:
    years = [2019, 2020, 2021]
    rev = [rng.randint(800, 2400) for _ in years]
    cost = [int(r * rng.uniform(0.5, 0.9)) for r in rev]
    rows = "\n".join(f"| {y} | {r} | {c} |" for y, r, c in zip(years, rev, cost, strict=True))
    q = rng.choice(["What was the percentage change in revenue from 2019 to 2021?",
                    "What was the operating margin in 2020?",
                    "By how much did costs grow between 2020 and 2021, in percent?"])
    return ("Here is a table (in millions of dollars):\n| year | revenue | costs |\n|---|---|---|\n"
            f"{rows}\n\n{q} Show the calculation.")


def prompts(n: int, seed: int, root: Path | None = None) -> list[Document]:
    """``n`` user messages (seeded): templates over actions, modules, cities and numbers, and
    summaries of standard-library documentation strings."""
    rng = random.Random(seed)
    import sys

    modules = sorted(m for m in sys.stdlib_module_names if not m.startswith("_"))
    # A fixed count (33: the first capture's), so prompts(n) is a prefix of prompts(n + k)
    # and the replies already made stay keyed to their prompts.
    docs = docstrings(33, seed, root)
    out: list[str] = []
    funcs = stdlib_functions(200, seed, root)
    makers = [
        lambda: rng.choice(_TASKS).format(x=rng.choice(_ACTIONS), y=rng.choice(_SQL),
                                          lang=rng.choice(_LANGS)),
        lambda: rng.choice(_TASKS).format(x=rng.choice(_ACTIONS), y=rng.choice(_SQL),
                                          lang=rng.choice(_LANGS)),
        lambda: rng.choice(_EXPLAIN).format(m=rng.choice(modules)),
        lambda: rng.choice(_CHAT),
        lambda: _math_prompt(rng),
        lambda: _table_prompt(rng),
        lambda: _tool_prompt(rng),
        lambda: _summary_prompt(rng, docs),
        lambda: _completion_prompt(rng, funcs),
        lambda: _code_explain_prompt(rng, funcs),
        lambda: _tool_result_prompt(rng),
        lambda: _general_prompt(rng),
        lambda: _general_prompt(rng),
    ]
    seen: set[str] = set()
    while len(out) < n:
        p = rng.choice(makers)()
        if p not in seen:
            seen.add(p)
            out.append(p)
    return [Document(f"prompt:{i}", "prompt", p) for i, p in enumerate(out)]


def _tool_prompt(rng: random.Random) -> str:
    name, params, ask = rng.choice(_TOOLS)
    ask = ask.format(c=rng.choice(_CITIES), d=rng.choice(_CITIES), f=rng.choice(_CUR),
                     t=rng.choice(_CUR), s=rng.choice(_SYMBOLS))
    return (f"You can call one tool, {name}({params}). To call it, answer only with JSON "
            f'{{"name": "{name}", "arguments": {{...}}}}.\n\n{ask}')


def _summary_prompt(rng: random.Random, docs: list[tuple[str, str]]) -> str:
    mod, doc = rng.choice(docs)
    return (f"Here is the documentation of Python's {mod} module:\n\n{doc}\n\n"
            "Summarise what it is for in a few sentences, then list its main uses.")


def stdlib_functions(n: int, seed: int, root: Path | None = None) -> list[tuple[str, str]]:
    """``n`` documented public standard-library functions of 4-40 lines as (stub, source): the
    stub is the signature and docstring, the source the whole function, both dedented; at most
    one per file, files in a seeded order."""
    import ast
    import textwrap

    out: list[tuple[str, str]] = []
    files = stdlib_files(root)
    random.Random(seed + 2).shuffle(files)
    for p in files:
        try:
            src = p.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        lines = src.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc, end = ast.get_docstring(node), node.end_lineno or node.lineno
            if not doc or len(doc) < 40 or not 4 <= end - node.lineno <= 40 or node.decorator_list:
                continue
            doc_end = node.body[0].end_lineno or node.lineno
            stub = textwrap.dedent("\n".join(lines[node.lineno - 1:doc_end])) + "\n"
            out.append((stub, textwrap.dedent("\n".join(lines[node.lineno - 1:end]))))
            break
        if len(out) >= n:
            break
    return out


def _completion_prompt(rng: random.Random, funcs: list[tuple[str, str]]) -> str:
    stub, _ = rng.choice(funcs)
    return rng.choice([
        f"Complete the following Python function:\n\n```python\n{stub}```",
        f"Implement this function so that it does what its docstring says:\n\n{stub}",
        f"{stub}",
    ])


def _code_explain_prompt(rng: random.Random, funcs: list[tuple[str, str]]) -> str:
    _, body = rng.choice(funcs)
    return rng.choice([
        f"Explain what this code does, line by line:\n\n```python\n{body}\n```",
        f"Review this function and suggest improvements:\n\n```python\n{body}\n```",
        f"Rewrite this Python function in JavaScript:\n\n```python\n{body}\n```",
        f"Write pytest tests for this function:\n\n```python\n{body}\n```",
    ])


def _tool_result_prompt(rng: random.Random) -> str:
    city = rng.choice(_CITIES)
    temp, wind = rng.randint(-5, 34), rng.randint(2, 40)
    sym, price = rng.choice(_SYMBOLS), round(rng.uniform(10, 400), 2)
    ch = round(rng.uniform(-4, 4), 2)
    results = [
        (f"What's the weather like in {city}?",
         f'{{"city": "{city}", "temperature_c": {temp}, "wind_kmh": {wind}, '
         f'"conditions": "{rng.choice(["sunny", "cloudy", "light rain", "snow", "fog"])}"}}'),
        (f"How is {sym} doing today?",
         f'{{"symbol": "{sym}", "price": {price}, "change_percent": {ch}, '
         f'"volume": {rng.randint(10_000, 9_000_000)}}}'),
        (f"Find me a flight from {city} to {rng.choice(_CITIES)} next Friday.",
         f'[{{"flight": "XA{rng.randint(100, 999)}", "departs": "07:{rng.randint(10, 59)}", '
         f'"price_eur": {rng.randint(60, 600)}}}, {{"flight": "XB{rng.randint(100, 999)}", '
         f'"departs": "18:{rng.randint(10, 59)}", "price_eur": {rng.randint(60, 600)}}}]'),
    ]
    ask, result = rng.choice(results)
    return (f"{ask}\n\nI already called the tool for you. Its result was:\n{result}\n\n"
            "Answer my question using this result.")


def _general_prompt(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.choice(_WRITE).format(t=rng.choice(_TOPICS))
    if kind == 1:
        return (f"Explain {rng.choice(_EXPLAIN_TOPICS)} to {rng.choice(_AUDIENCES)}.")
    if kind == 2:
        return (f"Translate into {rng.choice(_LANG_NAMES)}: \"{rng.choice(_SENTENCES)}\" Then "
                "explain any word choices that might be tricky.")
    if kind == 3:
        a, b = rng.randint(12, 40), rng.randint(2, 9)
        return rng.choice(_REASON).format(a=a, b=b, c=a + b, d=a + 2 * b)
    return rng.choice(_CHAT)


# ---------------------------------------------------------------------------------------------
# Disjointness from the test set


def _strings(obj: object) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_set_rows(data_dir: Path) -> list[str]:
    """Every string of the six sources: the test set's files (``data/testset/*.json``) and
    every row of the vendored source files (``data/sources/**``: JSON, JSON lines or text),
    used or not."""
    rows: list[str] = []
    for p in sorted((data_dir / "testset").glob("*.json")):
        rows.extend(_strings(json.loads(p.read_text(encoding="utf-8"))))
    for p in sorted((data_dir / "sources").rglob("*")):
        if not p.is_file() or p.suffix in (".md",):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        try:
            rows.extend(_strings(json.loads(text)))
            continue
        except json.JSONDecodeError:
            pass
        for line in text.splitlines():
            try:
                rows.extend(_strings(json.loads(line)))
            except json.JSONDecodeError:
                rows.append(line)
    return [r for r in rows if len(r) >= SPAN]


def _span_hashes(text: str) -> Iterable[bytes]:
    for i in range(len(text) - SPAN + 1):
        yield hashlib.blake2b(text[i:i + SPAN].encode("utf-8", "surrogatepass"),
                              digest_size=8).digest()


def forbidden_spans(rows: Iterable[str]) -> set[bytes]:
    """The hashes of every 50-character span of ``rows``."""
    out: set[bytes] = set()
    for r in rows:
        out.update(_span_hashes(r))
    return out


def overlap_report(docs: Iterable[str | Document], forbidden: set[bytes]) -> dict[str, int]:
    """Per document (name, or index for plain strings), how many of its 50-character spans
    occur in the test set; documents with none are left out."""
    out: dict[str, int] = {}
    for i, d in enumerate(docs):
        name, text = (d.name, d.text) if isinstance(d, Document) else (str(i), d)
        hits = sum(1 for h in _span_hashes(text) if h in forbidden)
        if hits:
            out[name] = hits
    return out
