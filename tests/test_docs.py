"""The commands the README, docs/ and experiments/ give still run: each script or tool they name is here and takes
their flags, values included (a flag renamed or a range narrowed would leave a reader a command that
fails). Nothing is run: each command is read by its script's own argument parser. And every link
between the docs finds its file and its heading."""

import argparse
import ast
import glob
import importlib
import os
import re
import shlex
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmark"))  # the developers' checks
sys.path.insert(0, os.path.join(ROOT, "experiments"))  # the research tools

FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"python3? ((?:benchmark/|experiments/)?[a-z_0-9]+\.py)\b(.*)")
# A doc's placeholders, read as a value of the right kind: seed N, RUN_DIR... (one or more run directories)
PLACEHOLDERS = {"N": "1", "RUN_DIR...": "RUN_DIR"}
OURS = sorted(
    glob.glob("*.py", root_dir=ROOT)
    + glob.glob("benchmark/*.py", root_dir=ROOT)
    + glob.glob("experiments/*.py", root_dir=ROOT)
)
DOCS = ["README.md", *sorted(glob.glob("docs/**/*.md", root_dir=ROOT, recursive=True))]
DOCS += sorted(glob.glob("experiments/**/*.md", root_dir=ROOT, recursive=True))


def flags_of(rest):
    """A command's flags, less a trailing comment and a doc's "..." (more flags), its placeholders made values."""
    return [PLACEHOLDERS.get(f, f) for f in shlex.split(re.split(r"\s#", rest)[0]) if f != "..."]


def doc_commands():
    """(doc, script, its flags) of each `python SCRIPT ...` in a code block or inline code of README.md, docs/ and
    experiments/, and in the docstrings of the scripts and tools."""
    commands = []
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        blocks = [re.sub(r"\\\n\s*", " ", block) for block in FENCED.findall(text)]  # a line continued by \
        lines = [line for block in blocks for line in block.splitlines()]
        lines += [" ".join(span.split()) for span in INLINE.findall(FENCED.sub("", text))]  # a span may wrap
        for line in lines:
            if match := COMMAND.match(line.strip().removeprefix("$ ")):
                commands.append((doc, match.group(1), flags_of(match.group(2))))
    for script in OURS:  # the usage lines of each script's and tool's docstring
        docstring = ast.get_docstring(ast.parse(open(os.path.join(ROOT, script), encoding="utf-8").read())) or ""
        for line in re.sub(r"\\\n\s*", " ", docstring).splitlines():
            if match := COMMAND.match(line.strip()):
                commands.append((script, match.group(1), flags_of(match.group(2))))
    return commands


class Parsed(Exception):
    """Raised in place of parse_args: the parser the script built, before anything else it does."""


def parser_of(script, monkeypatch):
    module = importlib.import_module(os.path.basename(script)[: -len(".py")])

    def capture(parser, *args, **kwargs):
        raise Parsed(parser)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(Parsed) as parsed:
            module.parse_args() if hasattr(module, "parse_args") else module.main()
    return parsed.value.args[0]


def test_every_command_in_the_docs_names_a_script_here_and_its_flags_parse(monkeypatch, capsys):
    commands = [(doc, script, flags) for doc, script, flags in doc_commands() if script != "pqn_atari_envpool.py"]
    assert len(commands) > 80  # README.md gives a few, docs/, experiments/ and the docstrings the rest: the reading found them
    parsers, refused = {}, []
    for doc, script, flags in commands:
        after_runs = flags[flags.index("--runs") + 1 :] if "--runs" in flags else []
        runs = after_runs[: next((i for i, f in enumerate(after_runs) if f.startswith("--")), len(after_runs))]
        # sweep.py's --runs entries are commands of the scripts themselves: each is read as well
        for name, argv in [(script, flags)] + [(run.split()[0], run.split()[1:]) for run in runs]:
            if name not in OURS:
                refused.append(f"{doc}: python {name}: no such script here")
                continue
            if name not in parsers:
                parsers[name] = parser_of(name, monkeypatch)
            try:
                parsers[name].parse_args(argv)
            except SystemExit:
                error = capsys.readouterr().err.strip().splitlines()[-1]
                refused.append(f"{doc}: python {name} {shlex.join(argv)}: {error}")
    assert not refused, "\n".join(refused)


def anchors(doc):
    """The #anchors of a Markdown file's headings, as GitHub makes them."""
    headings = [line.lstrip("#").strip().lower() for line in open(doc, encoding="utf-8") if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", heading).replace(" ", "-") for heading in headings}


def test_every_link_between_the_docs_finds_its_file_and_heading():
    broken, links = [], 0
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if link.startswith(("http://", "https://")):
                continue
            links += 1
            path, _, anchor = link.partition("#")
            target = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path)) if path else os.path.join(ROOT, doc)
            if not os.path.exists(target) or (anchor and target.endswith(".md") and anchor not in anchors(target)):
                broken.append(f"{doc}: {link}")
    assert links > 30  # the README links to docs/ and the results folders: the reading found them
    assert not broken, "\n".join(broken)


def test_the_readme_opens_on_the_set_up_and_stays_short():
    """A learner's README: its two set-up commands (a first run, the whole suite as CI runs it) in its first 25 lines,
    at most 1,300 words; the research is experiments/README.md's."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    head = text.splitlines()[:25]
    for command in (
        "python dqn_atari_mp.py --workers-count 2",
        "python -m pytest tests -q -n 2 --dist loadscope --durations=15",
    ):
        assert any(line.endswith(command) for line in head), command
    assert len(text.split()) <= 1300
