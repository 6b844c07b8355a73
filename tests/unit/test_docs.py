"""The README stays true to the code: the configuration table is the settings models', the two
commands are there."""

from tollgate.settings import REPO_ROOT
from tollgate_dev.docs import configuration_reference, render_readme


def test_the_configuration_reference_in_the_readme_is_generated_from_the_settings():
    readme = (REPO_ROOT / "README.md").read_text()
    assert render_readme(readme) == readme, "run `make docs` and commit README.md"


def test_the_reference_lists_every_variable_with_its_users():
    table = configuration_reference()
    # The review commands (local, or in the ops function) read a large document from the bucket when it is
    # named; nothing else needs it.
    assert (
        "| `DOCUMENTS_BUCKET` | required; support CLI: none; ops: none | api, scheduler, worker, support CLI, ops |"
        in table
    )
    assert "| `JOB_QUEUE_URLS` | required | relay, worker, support CLI, ops |" in table
    assert "| `JOB_DLQ_URLS` | required | support CLI, ops |" in table
    assert "`DATABASE_ROLE` | `tollgate_app`; migrate: none; relay: `tollgate_system`" in table


def test_the_readme_shows_the_two_commands():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
