"""Every public name of 4.30.2 that the installed release lacks has a row (needs the 4.30.2
wheel: ``nox -s legacy_survey`` downloads it and sets SHARDCOMPAT_LEGACY_WHEEL)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")

from shardcompat.transformers.legacy_survey import (
    Wheel,
    coverage,
    installed_surface,
    lm_head_models,
)

WHEEL = os.environ.get("SHARDCOMPAT_LEGACY_WHEEL", "")


@pytest.mark.skipif(not os.path.isfile(WHEEL), reason="no 4.30.2 wheel (SHARDCOMPAT_LEGACY_WHEEL); "
                    "nox -s legacy_survey downloads it")
def test_no_removed_name_of_4_30_is_unlisted() -> None:
    cov = coverage(Wheel(WHEEL), installed_surface())
    assert cov.found, "the survey found nothing: it no longer reads the wheel"
    assert not cov.unlisted, "removed names without a row in legacy_table:\n" + "\n".join(
        n.spelling for n in cov.unlisted)


@pytest.mark.skipif(not os.path.isfile(WHEEL), reason="no 4.30.2 wheel (SHARDCOMPAT_LEGACY_WHEEL); "
                    "nox -s legacy_survey downloads it")
def test_the_coverage_the_docs_page_shows_is_a_fresh_surveys() -> None:
    from shardcompat.transformers.legacy_table import COVERAGE

    installed = installed_surface()
    if str(installed["version"]) != COVERAGE["installed"]:
        pytest.skip(f"COVERAGE is of {COVERAGE['old']} against {COVERAGE['installed']}, this is "
                    f"{installed['version']}: regenerate it (legacy_survey WHEEL --coverage)")
    cov = coverage(Wheel(WHEEL), installed)
    assert cov.version == COVERAGE["old"]
    assert cov.by_where() == COVERAGE["by_where"], "regenerate with: python -m " \
        "shardcompat.transformers.legacy_survey WHEEL --coverage"


@pytest.mark.skipif(not os.path.isfile(WHEEL), reason="no 4.30.2 wheel (SHARDCOMPAT_LEGACY_WHEEL); "
                    "nox -s legacy_survey downloads it")
def test_auto_model_with_lm_head_chooses_as_the_wheel_did() -> None:
    from shardcompat.transformers.legacy_table import LM_HEAD_MODELS

    assert lm_head_models(Wheel(WHEEL)) == LM_HEAD_MODELS


@pytest.mark.skipif(not os.path.isfile(WHEEL), reason="no 4.30.2 wheel (SHARDCOMPAT_LEGACY_WHEEL); "
                    "nox -s legacy_survey downloads it")
def test_the_re_exports_of_the_removed_modules_are_the_wheels() -> None:
    from shardcompat.transformers.legacy_survey import reexports
    from shardcompat.transformers.legacy_table import REEXPORTS

    found = reexports(Wheel(WHEEL))
    assert found, "the survey found no re-export: it no longer reads the wheel"
    assert found == REEXPORTS, "regenerate with: python -m shardcompat.transformers.legacy_survey WHEEL --reexports"
