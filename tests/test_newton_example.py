"""examples/newton_robot_fall.py runs headless on the CPU and writes a Newton recording of the fall."""

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

newton = pytest.importorskip("newton")

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "newton_robot_fall.py"
FRAMES = 60  # 1 s at 60 frames/s: dropped from 0.6 m, the robot lands and tips over


def _example_module():
    spec = importlib.util.spec_from_file_location("newton_robot_fall", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_records_the_robot_falling(tmp_path):
    out = tmp_path / "robot_fall.json"
    run = subprocess.run([sys.executable, str(EXAMPLE), "--viewer", "file", "--out", str(out),
                          "--num-frames", str(FRAMES), "--device", "cpu"],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "status [1]" in run.stdout, run.stdout  # the last step converged
    assert out.exists() and out.stat().st_size > 0
    # Newton's own file viewer loads the recording back, frame by frame.
    viewer = newton.viewer.ViewerFile(str(out))
    viewer.load_recording()
    assert viewer.get_frame_count() == FRAMES + 1 and viewer.has_model()
    model = _example_module().build_robot(device="cpu")
    state = model.state()
    torso = model.body_label.index("torso")
    heights = []
    for frame in range(FRAMES + 1):
        viewer.load_state(state, frame)
        body_q = state.body_q.numpy()
        assert np.isfinite(body_q).all()
        heights.append(body_q[torso, 2])
    assert heights[0] == pytest.approx(0.6)
    assert 0.0 < heights[-1] < 0.3  # on the ground, not through it
    assert min(heights) > -0.01


def test_example_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        _example_module().main(["--num-frames", "0"])
