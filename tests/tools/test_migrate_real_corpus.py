"""rnnlib.migrate on real old-Flax code: what tests/migrate_real_corpus_report.py measures must
not get worse.

The manifest (tests/migrate_real_corpus.json: sources, licenses, lines marked by hand) is
checked always. The measurement needs the corpus files, which are third-party code kept outside
this repository (tests/migrate_real_corpus_report.py says where it looks); without them that
test is skipped, saying so, and counts as nothing.
"""

from __future__ import annotations

import io
import re

import pytest

from tests.migrate_real_corpus_report import check_files, find_corpus, load_manifest, measure

# Measured when the corpus was gathered (the report prints these): every site found, one
# review on a line that does not break (ipagnn.py calls its own wrapper's initialize_carry,
# which the checker cannot tell from a cell's), and --fix changes 24 of the 33 sites.
SITES, FOUND = 33, 33
FINDINGS, ON_A_SITE = 34, 33
FIXED_SITES = 24
LICENSES = {"MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause"}


def test_the_manifest_names_sources_licenses_and_marked_lines():
    entries = load_manifest()
    assert len(entries) >= 15 and len({e["repository"] for e in entries}) >= 8
    assert len({e["file"] for e in entries}) == len(entries)
    for entry in entries:
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"]), entry["file"]
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), entry["file"]
        assert entry["license"] in LICENSES and entry["license_file"].startswith("LICENSES/")
        assert entry["url"] == (
            f"https://github.com/{entry['repository']}/blob/{entry['commit']}/{entry['path']}"
        )
        for mark in entry["breaks"] + entry.get("outside_scope", []):
            lo, hi = mark["lines"]
            assert 1 <= lo <= hi and mark["why"], entry["file"]
    assert sum(len(e["breaks"]) for e in entries) == SITES


def test_measured_recall_and_precision_do_not_regress():
    corpus = find_corpus()
    if corpus is None:
        pytest.skip(
            "the real-code corpus is not here (third-party files, kept outside the repository: "
            "set MIGRATE_REAL_CORPUS, see tests/migrate_real_corpus_report.py)"
        )
    entries = load_manifest()
    assert check_files(corpus, entries) == []
    report = io.StringIO()
    totals = measure(corpus, entries, out=report)
    assert totals["sites"] == SITES
    assert totals["hit"] >= FOUND and totals["misses"] == [], report.getvalue()
    assert totals["findings"] - totals["true"] <= FINDINGS - ON_A_SITE, report.getvalue()
    assert totals["fixed_sites"] >= FIXED_SITES, report.getvalue()
    assert totals["fix_true"] == totals["fix_hunks"], report.getvalue()  # never edits elsewhere
    assert totals["called_clean"] == [] and totals["clean_after_fix"] == []
