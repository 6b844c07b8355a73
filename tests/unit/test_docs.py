"""The README stays true to the code: every setting is documented, the two commands are there."""

from tollgate import settings as settings_module
from tollgate.settings import REPO_ROOT


def test_every_setting_is_documented_in_the_readme():
    readme = (REPO_ROOT / "README.md").read_text()
    models = [
        getattr(settings_module, name)
        for name in dir(settings_module)
        if name.endswith("Settings") and isinstance(getattr(settings_module, name), type)
    ]
    fields = {field.upper() for model in models for field in model.model_fields}
    missing = sorted(f for f in fields if f"`{f}`" not in readme)
    assert missing == []


def test_the_readme_shows_the_two_commands():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
