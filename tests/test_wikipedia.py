"""Wikipedia dumps -> documents: the real English slice, the UTF-16 Bulgarian slice, resume."""

import bz2

import pytest
from conftest import PYTHON, run_command

from bert_tf.data import shards, wikipedia

ENGLISH = "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BULGARIAN = "wikipedia/bgwiki-latest-pages-articles-shortened.xml.bz2"
# Leftover wikitext that would become training text (the counts of bench/wikipedia.py).
MARKUP = ("{{", "}}", "[[", "]]", "|}", "{|", "<ref", "</ref", "&nbsp;", "<!--", "'''",
          "[http", "File:", "Category:", "thumb|")


def read_documents(paths):
    documents = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert text.endswith("\n\n"), path
        documents += [block.split("\n") for block in text.split("\n\n") if block]
    return documents


@pytest.fixture(scope="module")
def english(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("enwiki")
    result = run_command([PYTHON, "-m", "bert_tf", "wikipedia",
                          f"--input_files={shared_data / ENGLISH}", f"--output_dir={out}",
                          "--shard_mb=1", "--noprogress"])
    return out, result


def test_english_slice_is_clean_prose(english, shared_data):
    out, result = english
    paths = sorted(out.glob("wiki000-*.txt"))
    assert [p.name for p in paths] == ["wiki000-00000.txt", "wiki000-00001.txt",
                                       "wiki000-00002.txt"]
    assert "1 dump(s) -> 3 document shard(s)" in result.stdout
    text = "".join(p.read_text(encoding="utf-8") for p in paths)
    assert len(text) > 2_000_000
    assert {mark: text.count(mark) for mark in MARKUP} == dict.fromkeys(MARKUP, 0)
    documents = read_documents(paths)
    counts = [shards.read_counts(p) for p in paths]
    assert sum(c["documents"] for c in counts) == len(documents)
    assert sum(c["sentences"] for c in counts) == sum(map(len, documents))
    # Every kept page is a main-namespace article, and no redirect became a document.
    pages = list(wikipedia.iter_dump(shared_data / ENGLISH))
    redirects = [title for title, ns, redirect, _ in pages if redirect]
    articles = [page for page in pages if wikipedia.is_article(*page)]
    assert len(redirects) > 50 and len(documents) == len(articles) > 80
    first_lines = {d[0] for d in documents}
    assert documents[0][0].startswith("Anarchism is a political philosophy")
    assert not any(line.startswith(("REDIRECT", "#REDIRECT")) for line in first_lines)
    # Section titles are dropped; the prose of a section is kept.
    assert "Etymology and terminology" not in text.split("\n")
    assert any("The first known use of this word was in 1539." in d for d in documents)


def test_rerun_skips_finished_dump_and_resumes_after_last_shard(english, shared_data, tmp_path):
    out, _ = english
    expected = {p.name: p.read_bytes() for p in out.glob("wiki000-*.txt")}
    # A run killed after its first shard: shard 0 done, shard 1 half-written, no done marker.
    resumed = tmp_path / "resumed"
    (resumed / ".counts").mkdir(parents=True)
    (resumed / "wiki000-00000.txt").write_bytes(expected["wiki000-00000.txt"])
    (resumed / ".counts/wiki000-00000.txt.json").write_bytes(
        (out / ".counts/wiki000-00000.txt.json").read_bytes())
    (resumed / "wiki000-00001.txt.tmp").write_text("half a shard")
    counts = wikipedia.extract_dump(shared_data / ENGLISH, str(resumed), "wiki000", 1e6)
    assert len(counts) == 3
    assert {p.name: p.read_bytes() for p in resumed.glob("wiki000-*.txt")} == expected
    assert not list(resumed.glob("*.tmp"))


def test_utf16_dump_is_decoded(shared_data, tmp_path):
    pages = list(wikipedia.iter_dump(shared_data / BULGARIAN))
    assert len(pages) >= 3
    assert any("Уикипедия" in title for title, *_ in pages)
    result = run_command([PYTHON, "-m", "bert_tf", "wikipedia",
                          f"--input_files={shared_data / BULGARIAN}", f"--output_dir={tmp_path}",
                          "--noprogress"])
    assert "1 dump(s)" in result.stdout
    text = "".join(p.read_text(encoding="utf-8") for p in tmp_path.glob("wiki000-*.txt"))
    # One namespace-0 article (two project pages are skipped), decoded to Cyrillic prose.
    assert text.startswith("Григорианският календар (понякога наричан и Грегориански календар")
    assert text.count("\n\n") == 1 and len(text.split("\n")) > 50
    assert "\ufffd" not in text


def test_not_a_dump_is_refused(tmp_path):
    bad = tmp_path / "notes.xml.bz2"
    bad.write_bytes(bz2.compress(b"just some text, not XML\n"))
    truncated = tmp_path / "cut.xml.bz2"
    truncated.write_bytes(bz2.compress(b"<mediawiki><page><title>x</title>" * 100)[:200])
    for path in (bad, truncated):
        result = run_command([PYTHON, "-m", "bert_tf", "wikipedia", f"--input_files={path}",
                              f"--output_dir={tmp_path / 'out'}", "--noprogress"], check=False)
        assert result.returncode == 2
        assert f"{path} is not a complete MediaWiki XML dump" in result.stderr
        assert not list((tmp_path / "out").glob("*.txt*"))


def test_wikitext_rules():
    wikitext = (
        "{{Infobox person|name=X}}'''Ada''' ([[File:a.jpg|thumb|A portrait]] born 1815) was a "
        "[[mathematician|mathematical]] writer.<ref>{{cite book|title=T}}</ref> She worked "
        "with [[Charles Babbage]]&nbsp;on the engine.<!-- hidden -->\n"
        "== Life ==\nShe was born in London.\n* She wrote notes.\n* She died in 1852.\n"
        "{| class=wikitable\n|a||b\n|}\n"
        "== References ==\n* A source.\n[[Category:Mathematicians]]\n[[de:Ada Lovelace]]\n")
    assert wikipedia.wikitext_to_paragraphs(wikitext) == [
        "Ada (born 1815) was a mathematical writer. She worked with Charles Babbage on the "
        "engine.",
        "She was born in London.", "She wrote notes.", "She died in 1852."]
    assert not wikipedia.is_article("Mercury (disambiguation)", "0", False, "x")
    assert not wikipedia.is_article("Mercury", "0", False, "'''Mercury''' may be:\n{{disambig}}")
    assert not wikipedia.is_article("Talk:Mercury", "1", False, "x")
    assert not wikipedia.is_article("AC", "0", True, "#REDIRECT [[Computer accessibility]]")
    assert wikipedia.is_article("Mercury", "0", False, "'''Mercury''' is a planet.")
