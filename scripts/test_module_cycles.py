"""The file-level mode of module_cycles.py on small made-up crates: which paths make a file
depend on another, and that circles are found and `--check` fails on them."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("module_cycles.py")
sys.path.insert(0, str(SCRIPT.parent))
import module_cycles  # noqa: E402


def crate(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "src"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return src


def edges(src: Path) -> set[tuple[str, str]]:
    c = module_cycles.Crate(src)
    return {
        (str(f.relative_to(src)), str(t.relative_to(src)))
        for f in c.files
        for t, _ in c.references(f)
        if t != f
    }


def check(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--files", str(src), "--check"],
        capture_output=True,
        text=True,
    )


def test_a_reexport_in_lib_is_a_dependency_on_the_file_it_comes_from(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod engine;\nmod error;\npub use engine::{Engine, Options as Opts};\n",
            "engine.rs": "pub struct Engine;\npub struct Options;\n",
            "error.rs": "use crate::Engine;\nfn f(_: crate::Opts) {}\n",
        },
    )
    assert ("error.rs", "engine.rs") in edges(src)
    assert ("error.rs", "lib.rs") not in edges(src)


def test_super_self_groups_and_nested_modules(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "mod x;\nmod y;\npub use self::y::Why;\n",
            "a/x.rs": "use super::{y::Y, Why};\n",
            "a/y.rs": "pub struct Y;\npub struct Why;\n",
            "b.rs": "fn f() { crate::a::x::g(); }\n",
        },
    )
    e = edges(src)
    assert ("a/x.rs", "a/y.rs") in e
    assert ("a/x.rs", "a/mod.rs") not in e
    assert ("b.rs", "a/x.rs") in e
    assert ("a/mod.rs", "a/y.rs") in e


def test_comments_strings_and_a_files_own_tests_do_not_count(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": '// crate::b::B\n/// [`crate::b::B`]\nconst S: &str = "crate::b::B";\n'
            "const R: &str = r#\"super::b\"#;\n"
            "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            "b.rs": "pub struct B;\n",
        },
    )
    assert edges(src) == set()


def test_an_item_defined_where_a_module_of_the_same_name_is_imported(tmp_path):
    # `service.rs` imports the module `infer` and defines a function `infer`: the function is
    # what `super::service::infer` names.
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod infer;\nmod grpc;\n",
            "infer.rs": "pub fn run() {}\n",
            "grpc/mod.rs": "mod service;\nmod stream;\n",
            "grpc/service.rs": "use crate::infer;\npub fn infer() { infer::run() }\n",
            "grpc/stream.rs": "use super::service::infer;\n",
        },
    )
    assert ("grpc/stream.rs", "grpc/service.rs") in edges(src)
    assert ("grpc/stream.rs", "infer.rs") not in edges(src)


def test_a_circle_is_printed_with_its_evidence_and_fails_the_check(tmp_path):
    src = crate(
        tmp_path,
        {
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B;\nfn f(_: crate::c::C) {}\n",
            "c.rs": "\n\nuse super::a::A;\npub struct C;\n",
        },
    )
    out = check(src)
    assert out.returncode == 1, out.stdout
    assert "circle of 3: a.rs b.rs c.rs" in out.stdout
    assert "c.rs -> a.rs  (c.rs:3)" in out.stdout


@pytest.mark.parametrize("crate_dir", ["engine", "protocol", "kernels", "plugins/host"])
def test_the_workspace_crates_have_no_circle(crate_dir):
    root = SCRIPT.parent.parent
    out = check(root / crate_dir / "src")
    assert out.returncode == 0, out.stdout
