"""No shell between SCons and nnbuild: model files, their folders, the project's folder and a
build_dir whose names hold backticks, `$(...)`, `;`, quotes, `$VAR`, newlines and spaces build as
any other, and no command hidden in a name runs (each would create a canary file)."""

import shutil
import sys

import pytest

from conftest import REPO, copy_project, scons

XOR = REPO / "firmware_examples" / "xor" / "xor.h5"
#: the root of a project copy: a shell reading any path under it would run these
ROOT = "proj `touch pwned_root1` $(touch pwned_root2);touch pwned_root3; 'q' \"d\""
#: model paths (folder/file) under the project, each a command for a shell
MODELS = {
    "quotes": "dir `touch pwned_a` x $(touch pwned_b);touch pwned_c;/b `touch pwned_d` 'it''s' \"c\"; $(touch pwned_e).h5",
    "newline": "nl\nfolder $HOME/new\nline ${PATH}.h5",
    "dash": "-dash/-m.h5",
}
#: NNModel's build_dir in a user's project: nnbuild's compile, archive and link commands see it
BUILD_DIR = "out `touch pwned_o1` $(touch pwned_o2);touch pwned_o3; 'q' \"d\"\nnl"


def canaries(top):
    return sorted(str(p) for p in top.rglob("pwned*") if p.is_file())


def hostile_project(tmp_path):
    (tmp_path / ROOT).mkdir()
    project = copy_project(tmp_path / ROOT)
    for path in MODELS.values():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(XOR, project / path)
    return project


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(MODELS))
def test_a_model_path_is_never_read_by_a_shell(tmp_path, case):
    project = hostile_project(tmp_path)
    result = scons(project, "target=host", f"model={MODELS[case]}")
    assert result.returncode == 0, result.stderr
    assert canaries(tmp_path) == [] and not list(project.glob("pwned*"))
    (report,) = project.glob("build/host/*/report.json")
    assert (report.parent / "gate.json").exists()


USER_SCONSTRUCT = '''
import nnbuild.scons_tool
env = Environment(tools=["default", "nnbuild_tool"], toolpath=[nnbuild.scons_tool.toolpath()], NNBOARD="host")
model = env.NNModel("model_weights", {model!r}, build_dir={build_dir!r}, tolerance=1e-5,
                    input_range=(0.0, 1.0), count=4)
Default(model)
'''


@pytest.mark.e2e
def test_nnmodel_compiles_and_links_in_a_hostile_build_dir_without_a_shell(tmp_path):
    """NNModel's objects, library and check program live in build_dir: SCons' own compile, archive
    and link commands get those paths, and run them without `sh`. The model is named
    `model_weights` (its inference file and its weights file are compiled once each)."""
    project = hostile_project(tmp_path)
    (project / "SConstruct").write_text(USER_SCONSTRUCT.format(model=MODELS["quotes"], build_dir=BUILD_DIR))
    result = scons(project, "-j", "2")
    assert result.returncode == 0, result.stderr
    assert canaries(tmp_path) == []
    built = project / BUILD_DIR
    assert (built / "libmodel_weights.a").exists() and (built / "gate.json").exists()
    again = scons(project, "-j", "2")
    assert again.returncode == 0 and "[nnbuild]" not in again.stdout, again.stdout


class FakeNode:
    def __init__(self, path):
        self.path, self.name = path, path.rsplit("/", 1)[-1]
        self.dir = self if "/" not in path else FakeNode(path.rsplit("/", 1)[0])

    def __str__(self):
        return self.path

    def for_signature(self):
        return self.name


def test_step_arguments_resolve_nodes_and_keep_every_other_dollar():
    from nnbuild.scons_tool import literal, node_path, resolve_argument
    targets, sources = [FakeNode("build/x/gen/x.h")], [FakeNode("d $(id)/m `id`.h5"), FakeNode("-m.h5")]
    value = literal("a $HOME $(id) ${PATH}")
    assert resolve_argument(value, targets, sources, str) == "a $HOME $(id) ${PATH}"
    assert resolve_argument("--model=${SOURCES[0]}", targets, sources, str) == "--model=d $(id)/m `id`.h5"
    assert resolve_argument("l=${SOURCES[1]}", targets, sources, node_path) == "l=./-m.h5"
    assert resolve_argument("${TARGET.dir}", targets, sources, str) == "build/x/gen"
    assert resolve_argument("$TARGET", targets, sources, lambda n: n.for_signature()) == "x.h"
    with pytest.raises(ValueError, match="outside a node reference"):
        resolve_argument("$HOME", targets, sources, str)


def test_scons_words_come_back_as_the_program_arguments(tmp_path):
    """SCons wraps a word with blanks in double quotes for `sh`; the spawn without a shell undoes
    exactly that, and runs the list as it is."""
    from nnbuild.scons_tool import escape_for_argv, no_shell_spawn, shell_words
    words = ["a b", '"q" x', "`id`;$(id)", "nl\nx", "plain"]
    assert shell_words([escape_for_argv(w) for w in words]) == words
    out = tmp_path / "args.txt"
    script = f"import sys; open({str(out)!r}, 'w').write(repr(sys.argv[1:]))"
    status = no_shell_spawn("sh", escape_for_argv, sys.executable,
                            [sys.executable, "-c", escape_for_argv(script), *map(escape_for_argv, words)], {})
    assert status == 0 and out.read_text() == repr(words)


@pytest.mark.e2e
def test_nnfirmware_refuses_a_model_folder_its_shell_commands_would_read(tmp_path):
    """The user's own sources are compiled by the user's environment (through `sh`, as SCons does):
    a model folder with characters `sh` reads is refused in one line before anything runs."""
    project = hostile_project(tmp_path)
    (project / "main.c").write_text("int main(void) { return 0; }\n")
    (project / "SConstruct").write_text(USER_SCONSTRUCT.format(model=MODELS["quotes"], build_dir=BUILD_DIR)
                                        + 'env.NNFirmware("app", ["main.c"], models=[model])\n')
    result = scons(project)
    errors = [l for l in result.stderr.splitlines() if l.strip()]
    assert result.returncode != 0 and len(errors) == 1, result.stderr
    assert "NNFirmware: model 'model_weights' is built in" in errors[0] and "through SCons' shell" in errors[0]
    assert canaries(tmp_path) == [] and not (project / BUILD_DIR).exists()
