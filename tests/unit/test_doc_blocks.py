"""Docs that hold: every shell block of a user page is marked, and the names it uses exist.

A renamed make target, Helm value, ``records`` view or flag, CRD name or repository path fails
here, naming the page, the line of the block's fence and the name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.doc_blocks import (
    HOW_TO_MARK,
    REPO,
    Block,
    blocks,
    header_problems,
    problems,
    unmarked,
    user_pages,
)


def every_block() -> list[Block]:
    return [block for page in user_pages() for block in blocks(page)]


def test_the_user_pages_show_shell_blocks_to_check() -> None:
    pages = {block.page.name for block in every_block()}
    assert {"README.md", "getting-started.md", "install.md", "records.md"} <= pages
    assert len(every_block()) >= 40


def test_every_shell_block_of_a_user_page_is_marked() -> None:
    assert unmarked(user_pages()) == []


@pytest.mark.parametrize("block", every_block(), ids=Block.where)
def test_a_shell_block_names_only_what_the_repository_has(block: Block) -> None:
    assert problems(block) == []


def test_the_checks_see_the_names_the_pages_use() -> None:
    """The static check reads real commands, not nothing: each kind of name is met somewhere."""
    text = "\n".join(block.text for block in every_block())
    for used in (
        "make demo",
        "--set image.tag=",
        "-m agentihooks_swarm records retained",
        "kubectl get executions",
    ):
        assert used in text


def copy_of(page: Path, tmp_path: Path) -> Path:
    """A repository of one page: the copy beside the real Makefile, chart, CRDs and paths."""
    for name in ("Makefile", "charts", "manifests", "mkdocs.yml"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "docs").mkdir()
    copy = tmp_path / "docs" / page.name
    shutil.copy(page, copy)
    return copy


def test_a_broken_block_in_a_copy_fails_naming_the_block(tmp_path: Path) -> None:
    copy = copy_of(REPO / "docs" / "getting-started.md", tmp_path)
    text = copy.read_text()
    broken = (
        text.replace("--set image.tag=", "--set image.tagg=")
        .replace("records retained example", "records kept example")
        .replace("kubectl get executions", "kubectl get executionz")
    )
    assert broken != text
    copy.write_text(broken)
    found = [problem for block in blocks(copy) for problem in problems(block, tmp_path)]
    install = next(block for block in blocks(copy) if "helm install" in block.text)
    read = next(block for block in blocks(copy) if "records kept" in block.text)
    apply = next(block for block in blocks(copy) if "executionz" in block.text)
    assert (
        f"{install.where()}: helm value 'image.tagg' is not in charts/agentihooks-swarm/values.yaml" in found
    )
    assert any(problem.startswith(f"{read.where()}: records view 'kept' is not one of") for problem in found)
    assert f"{apply.where()}: kubectl resource 'executionz' is not a name of manifests/crds" in found
    assert len(found) == 3


def test_a_renamed_make_target_flag_or_path_fails(tmp_path: Path) -> None:
    copy = copy_of(REPO / "README.md", tmp_path)
    copy.write_text(
        copy.read_text()
        .replace("make demo", "make demos")
        .replace("-f manifests/examples/refused-worker.yaml", "-f manifests/examples/refused.yaml")
        + "\n<!-- docs: static -->\n```bash\n"
        "kubectl exec -n swarm x -- python -m agentihooks_swarm records forget s e --requested-bye me\n```\n"
    )
    found = [problem for block in blocks(copy) for problem in problems(block, tmp_path)]
    assert any("make target 'demos' is not in the Makefile" in problem for problem in found)
    assert any(
        "path 'manifests/examples/refused.yaml' is not in the repository" in problem for problem in found
    )
    assert any("records flag '--requested-bye' is not one of" in problem for problem in found)
    assert len(found) == 3


def test_an_unmarked_block_fails_saying_how_to_mark_it(tmp_path: Path) -> None:
    copy = copy_of(REPO / "docs" / "records.md", tmp_path)
    marked = copy.read_text()
    copy.write_text(marked.replace("<!-- docs: static -->\n", "", 1))
    first = blocks(copy)[0]
    assert first.mark is None
    assert unmarked([copy]) == [f"{first.where()}: shell block without a mark (None); {HOW_TO_MARK}"]


@pytest.mark.parametrize("page", user_pages(), ids=lambda page: page.name)
def test_the_kubectl_get_columns_a_page_shows_are_the_crds(page: Path) -> None:
    assert header_problems(page) == []


def test_a_renamed_column_in_a_copy_fails_naming_the_line(tmp_path: Path) -> None:
    copy = copy_of(REPO / "docs" / "getting-started.md", tmp_path)
    lines = copy.read_text().splitlines()
    at = next(number for number, line in enumerate(lines) if line.startswith("NAME "))
    assert header_problems(copy, tmp_path) == []
    lines[at] = lines[at].replace("HANDED", "GRANTED")
    copy.write_text("\n".join(lines))
    assert header_problems(copy, tmp_path) == [
        f"getting-started.md:{at + 1}: columns {' '.join(lines[at].split())} are not a CRD's printer columns"
    ]
