"""What the training tests share: the tiny spec's data stages, built once per session."""

import pytest

from runlib.graph.build import build_graph
from runlib.spec import load_spec
from tests.workflow.conftest import TINY, snakemake


# Session scope, in a conftest: xdist may run other modules' tests between a module's on the same worker,
# and pytest tears a module fixture down whenever it leaves the module (it was built 3 times); the modules
# that read it (test_phase_training, test_moe_training) share one xdist group, so one worker builds it once.
@pytest.fixture(scope="session")
def tokenized(tmp_path_factory):
    """The tiny spec's data stages, built once by real Snakemake."""
    workdir = tmp_path_factory.mktemp("train")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNLIB_WORK_DIR", str(workdir / "work"))
        spec = load_spec(TINY).spec
        graph = build_graph(spec)
        targets = [str(n.done_path) for n in graph.of("tokenize")]
        proc = snakemake(workdir, TINY, "--cores", "2", *targets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return spec, graph, workdir
