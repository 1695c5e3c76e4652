"""The one writer (:mod:`adaspark.io`): atomic replacement, parents, the JSON form, the append log,
the dataclass -> Arrow mapper, and a scan of the package's source for any other writer."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adaspark import io

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "adaspark"


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


# ---------------------------------------------------------------------------------------------
# Atomic replacement


def test_a_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    io.write_text(target, "old\n")
    assert io.write_text(target, "néw\n") == target
    assert target.read_bytes() == "néw\n".encode()
    assert siblings(target) == ["out.txt"]


def test_a_failure_mid_write_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "table.csv"
    io.write_text(target, "a,b\n1,2\n")
    with pytest.raises(RuntimeError, match="disk full"), io.atomic_path(target) as tmp:
        tmp.write_bytes(b"a,b\n3,")  # half of the new file, then the writer fails
        raise RuntimeError("disk full")
    assert target.read_text() == "a,b\n1,2\n"
    assert siblings(target) == ["table.csv"]


def test_a_failing_serialiser_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "index.json"
    io.write_json(target, {"n": 1})
    with pytest.raises(ValueError, match="JSON compliant"):
        io.write_json(target, {"n": float("nan")}, allow_nan=False)
    rows = io.write_parquet(tmp_path / "rows.parquet", pa.table({"x": [1]}))
    with pytest.raises((TypeError, AttributeError)):
        io.write_parquet(rows, {"x": [2]})  # type: ignore[arg-type]  # not a table
    assert json.loads(target.read_text()) == {"n": 1}
    assert pq.read_table(rows).column("x").to_pylist() == [1]
    assert siblings(target) == ["index.json", "rows.parquet"]


def test_a_writer_that_writes_elsewhere_is_an_error(tmp_path: Path) -> None:
    target = tmp_path / "fig.png"
    with pytest.raises(FileNotFoundError, match="write to the path atomic_path yields"), \
            io.atomic_path(target):
        pass
    assert not target.exists() and siblings(target) == []


def test_the_temporary_path_is_a_hidden_sibling_with_the_suffix(tmp_path: Path) -> None:
    # matplotlib picks the format by extension: the temporary name must keep it
    target = tmp_path / "fig6.pdf"
    with io.atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.suffix == ".pdf"
        assert tmp.name.startswith(".fig6.") and tmp != target
        tmp.write_bytes(b"%PDF")
    assert target.read_bytes() == b"%PDF"


def test_parents_are_created(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    io.write_bytes(deep / "x.bin", b"\x00\x01")
    io.write_parquet(deep / "t.parquet", pa.table({"x": [1, 2]}))
    with io.atomic_path(deep / "d" / "y.txt") as tmp:
        tmp.write_text("y")
    assert (deep / "x.bin").read_bytes() == b"\x00\x01"
    assert pq.read_table(deep / "t.parquet").column("x").to_pylist() == [1, 2]
    assert (deep / "d" / "y.txt").read_text() == "y"


def test_json_is_the_projects_form_byte_for_byte(tmp_path: Path) -> None:
    obj = {"name": "Qwen2.5 – 1.5B", "n": [1, 2], "x": 0.5, "nested": {"ok": True}}
    io.write_json(tmp_path / "a.json", obj)
    want = json.dumps(obj, indent=1, ensure_ascii=False) + "\n"
    assert (tmp_path / "a.json").read_bytes() == want.encode("utf-8")
    io.write_json(tmp_path / "b.json", obj, indent=2, ensure_ascii=True)
    assert (tmp_path / "b.json").read_text() == json.dumps(obj, indent=2) + "\n"


def test_open_append_appends_and_creates_parents(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "server.log"
    for line in (b"one\n", b"two\n"):
        with io.open_append(log) as f:
            f.write(line)
    assert log.read_bytes() == b"one\ntwo\n"


# ---------------------------------------------------------------------------------------------
# Records as Arrow


@dataclass
class Synthetic:
    i: int
    f: float
    s: str
    b: bool
    li: list[int]
    lf: list[float]
    ls: list[str]
    oi: int | None
    of: float | None
    ob: bool | None
    _running: float = 0.0
    defaulted: list[int] = field(default_factory=list)


def test_arrow_schema_maps_every_supported_type() -> None:
    schema = io.arrow_schema(Synthetic)
    assert schema.names == ["i", "f", "s", "b", "li", "lf", "ls", "oi", "of", "ob", "defaulted"]
    assert schema.types == [pa.int64(), pa.float64(), pa.string(), pa.bool_(),
                            pa.list_(pa.int64()), pa.list_(pa.float64()), pa.list_(pa.string()),
                            pa.int64(), pa.float64(), pa.bool_(), pa.list_(pa.int64())]
    assert all(f.nullable for f in schema)
    row = Synthetic(1, 0.5, "x", True, [1], [0.5], ["y"], None, None, None)
    table = pa.Table.from_pylist([{k: v for k, v in vars(row).items() if k[0] != "_"}],
                                 schema=schema)
    assert table.column("oi").to_pylist() == [None]


@dataclass
class Unsupported:
    ok: int
    mapping: dict[str, int]


@dataclass
class TwoTypes:
    either: int | str


def test_arrow_schema_names_the_field_it_cannot_map() -> None:
    with pytest.raises(TypeError, match=r"Unsupported\.mapping: no Arrow type for dict\[str, "):
        io.arrow_schema(Unsupported)
    with pytest.raises(TypeError, match=r"TwoTypes\.either: no Arrow type"):
        io.arrow_schema(TwoTypes)
    with pytest.raises(TypeError, match="takes a dataclass type"):
        io.arrow_schema(dict)


def test_the_project_records_use_the_one_mapper() -> None:
    from adaspark.rules.adaspark import records
    from adaspark.runs import rows

    assert rows.ROW_SCHEMA.equals(io.arrow_schema(rows.ReplyRow))
    assert rows.ROW_SCHEMA.field("decode_tps").type == pa.float64()
    assert records.ROUND_SCHEMA.field("accepted_path").type == pa.list_(pa.int64())
    assert records.ROUND_SCHEMA.field("rho").type == pa.float64()
    assert "_loss_fitted" not in records.SUMMARY_SCHEMA.names


# ---------------------------------------------------------------------------------------------
# No other writer in the package

#: Calls that write (or set up a write) wherever they appear: ``module.function``.
MODULE_WRITERS = {("json", "dump"), ("os", "replace"), ("os", "rename"), ("os", "fdopen"),
                  ("pq", "write_table"), ("parquet", "write_table"), ("shutil", "copy"),
                  ("shutil", "copyfile"), ("shutil", "copy2"), ("shutil", "copyfileobj"),
                  ("shutil", "move"), ("OmegaConf", "save"), ("yaml", "dump"),
                  ("yaml", "safe_dump"), ("np", "save"), ("numpy", "save"), ("pickle", "dump")}
#: Methods that write whatever object they are called on.
METHOD_WRITERS = {"write_text", "write_bytes"}
#: Writers given a path of their own: allowed only on the path ``io.atomic_path`` yields.
PATH_WRITERS = {"savefig", "to_parquet", "to_csv", "to_json", "to_excel", "GGUFWriter",
                "ParquetWriter"}
WRITE_MODES = set("wax+")


def _mode(call: ast.Call, position: int) -> object:
    """The ``mode`` argument of an ``open`` call: a constant, ``"r"`` when absent, else None."""
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value.value if isinstance(kw.value, ast.Constant) else None
    if len(call.args) > position:
        arg = call.args[position]
        return arg.value if isinstance(arg, ast.Constant) else None
    return "r"


def _atomic_targets(tree: ast.AST) -> set[str]:
    """Names bound by ``with atomic_path(...) as NAME`` anywhere in the module."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if (isinstance(call, ast.Call) and isinstance(item.optional_vars, ast.Name)
                        and getattr(call.func, "attr", getattr(call.func, "id", None))
                        == "atomic_path"):
                    names.add(item.optional_vars.id)
    return names


def _first_arg_name(call: ast.Call) -> str | None:
    arg = call.args[0] if call.args else next(
        (kw.value for kw in call.keywords if kw.arg in ("path", "path_or_buf", "fname")), None)
    return arg.id if isinstance(arg, ast.Name) else None


def writes_in(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, what)`` of every write in a module outside :mod:`adaspark.io`."""
    atomic = _atomic_targets(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if "tempfile" in mods:
                found.append((node.lineno, "import tempfile"))
            continue
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(
            func.value, ast.Name) else None
        what = None
        if (owner, name) in MODULE_WRITERS or (
                name in METHOD_WRITERS and isinstance(func, ast.Attribute) and owner != "io"):
            what = f"{owner + '.' if owner else ''}{name}"
        elif name in ("replace", "rename") and isinstance(func, ast.Attribute) \
                and owner not in ("str",) and len(node.args) == 1 and not node.keywords:
            what = f".{name}(path)"  # Path.replace / Path.rename (str.replace takes two)
        elif name == "open" and isinstance(func, ast.Name):
            mode = _mode(node, 1)
            what = None if isinstance(mode, str) and not WRITE_MODES & set(mode) else "open(w)"
        elif name == "open" and isinstance(func, ast.Attribute):
            # Path.open(mode); a first argument that is not a string is a member's name
            # (ZipFile.open(name)), which reads
            mode = _mode(node, 0)
            unknown = mode is None and any(kw.arg == "mode" for kw in node.keywords)
            writes = isinstance(mode, str) and bool(WRITE_MODES & set(mode))
            what = ".open(w)" if unknown or writes else None
        elif name in PATH_WRITERS:
            if name in ("to_csv", "to_json") and not node.args and not any(
                    kw.arg == "path_or_buf" for kw in node.keywords):
                continue  # returns text, writes nothing
            if _first_arg_name(node) not in atomic:
                what = f"{name} (not on the path of io.atomic_path)"
        if what:
            found.append((node.lineno, what))
    return sorted(found)


def test_writes_in_finds_every_primitive() -> None:
    source = '''
import tempfile
import json, os, shutil
import pyarrow.parquet as pq
from adaspark.io import atomic_path
p.write_text("x")
json.dump({}, f)
os.replace(a, b)
p.replace(q)
open(p, "w")
p.open("ab")
p.open(mode=m)
pq.write_table(t, p)
shutil.copyfile(a, b)
fig.savefig(out)
frame.to_csv(out, index=False)
s = "a".replace("a", "b")
text = frame.to_csv(index=False)
open(p).read()
with atomic_path(out) as tmp:
    fig.savefig(tmp)
'''
    lines = [line for line, _ in writes_in(ast.parse(source))]
    assert lines == [2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]


def test_no_module_but_io_writes_a_file() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "io.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
                  for line, what in writes_in(tree)]
    assert not found, ("write through adaspark.io (write_text, write_bytes, write_json, "
                       "write_parquet, atomic_path, open_new, open_append), not:\n  "
                       + "\n  ".join(found))
