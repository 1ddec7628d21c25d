"""The sandbox spec and settings, the backends chosen by name, workspaces from templates and
the warm pool, with real bubblewrap and real git."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import wait_gone

from agentfleet.config import load_settings
from agentfleet.errors import ConfigError
from agentfleet.sandbox.bubblewrap import find_bwrap
from agentfleet.sandbox.pool import SandboxPool
from agentfleet.sandbox.spec import task_sandbox


@pytest.fixture
def template() -> Iterator[Path]:
    # Under /tmp itself: the sandbox's user must reach the template's git objects.
    root = Path(tempfile.mkdtemp(prefix="af-sbx-template-"))
    root.chmod(0o755)
    (root / "seed.txt").write_text("seed\n")
    yield root
    shutil.rmtree(root)


@pytest.fixture
def git_template(template: Path) -> Path:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@e"
    for args in (["init", "-q"], ["add", "seed.txt"], ["commit", "-q", "-m", "seed"]):
        subprocess.run(["git", "-C", str(template), *args], check=True, env=env)
    return template


def _pool(**sandbox: object) -> Iterator[SandboxPool]:
    pool = SandboxPool(load_settings(sandbox=sandbox))
    yield pool
    pool.close()


def test_a_spec_merges_over_the_settings_limit_by_limit() -> None:
    settings = load_settings(sandbox={"limits": {"cpu_s": 7, "memory_mb": 100}, "template": "/srv/t"})
    spec = task_sandbox(
        {"limits": {"memory_mb": 64}, "network": ["*.pypi.org", "github.com:443"]}, settings, "t"
    )
    assert spec is not None and spec.limits is not None
    assert (spec.limits.cpu_s, spec.limits.memory_mb) == (7, 64)
    assert (spec.template, spec.backend) == ("/srv/t", "bubblewrap")


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ({"network": ["https://x.org/path"]}, "network"),
        ({"artifacts": ["../outside"]}, "artifacts"),
        ({"limits": {"cpu_s": 0}}, "limits.cpu_s"),
        ({"backend": "docker"}, "backend"),
        ({"credentials": ["github"]}, "[credentials]"),
    ],
)
def test_a_wrong_spec_is_one_error_naming_the_field(value: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=r"^t: ") as caught:
        task_sandbox(value, load_settings(), "t")
    assert names in str(caught.value)


def test_a_wrong_sandbox_setting_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="sandbox"):
        load_settings(sandbox={"backend": "vm"})


def test_bwrap_missing_is_one_error_naming_the_setting_and_the_package() -> None:
    with pytest.raises(ConfigError) as caught:
        find_bwrap(path="/nonexistent")
    assert "apt-get install bubblewrap" in str(caught.value)
    assert "AGENTFLEET_SANDBOX__BACKEND" in str(caught.value)


def test_the_none_backend_runs_without_isolation_only_when_named(template: Path) -> None:
    for pool in _pool(backend="none", template=str(template)):
        spec = task_sandbox({}, pool.settings, "t")
        assert spec is not None
        lease = pool.acquire(spec)
        result = lease.sandbox.run(["sh", "-c", "cat seed.txt; id -u"])
        assert result.stdout == f"seed\n{os.getuid()}\n"
        lease.release()
        with pytest.raises(ConfigError, match="network"):
            pool.acquire(spec.model_copy(update={"network": ["x.org"]}))


def test_the_warm_pool_hands_out_ready_sandboxes_and_resets_them(template: Path) -> None:
    for pool in _pool(warm=2, template=str(template)):
        pool.fill()
        assert pool.warm_count() == 2
        spec = task_sandbox({}, pool.settings, "t")
        assert spec is not None
        lease = pool.acquire(spec)
        first = lease.sandbox.workspace
        assert lease.sandbox.run(["sh", "-c", "echo x > left-behind; sleep 300 &"]).exit_code == 0
        lease.release()
        assert sorted(os.listdir(first)) == ["seed.txt"], "reset to the template"
        assert wait_gone(os.stat(first).st_uid)
        assert pool.warm_count() == 2
    assert not first.exists(), "closing the pool destroys its warm sandboxes"


def test_a_git_template_is_cloned_per_item_and_git_works_inside(git_template: Path) -> None:
    for pool in _pool(template=str(git_template)):
        spec = task_sandbox({}, pool.settings, "t")
        assert spec is not None
        lease = pool.acquire(spec)
        script = (
            "git log --format=%s && echo more >> seed.txt && "
            "git -c user.name=a -c user.email=a@b commit -qam second && git log --format=%s"
        )
        result = lease.sandbox.run(["sh", "-c", script])
        assert result.stdout.split() == ["seed", "second", "seed"], result
        lease.release()
    log = subprocess.run(
        ["git", "-C", str(git_template), "log", "--format=%s"], capture_output=True, text=True
    )
    assert log.stdout.split() == ["seed"], "the template repository is untouched"
