"""Wikipedia dumps -> documents: the real English slice, the UTF-16 Bulgarian slice, resume."""

import bz2
import re

import pytest
from conftest import PYTHON, run_command

from bert_tf.data import shards, wikipedia
from bert_tf.data.numeric_flags import FlagValueError

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


@pytest.mark.parametrize("shard_mb", [0.0, -1.0, float("nan")])
def test_shard_mb_must_be_a_positive_number(shared_data, tmp_path, shard_mb):
    """Issue 37: 0, -1 and nan were accepted (prepare_dataset refused them)."""
    with pytest.raises(FlagValueError, match=f"--shard_mb must be a finite number > 0, got "
                                             f"{shard_mb}"):
        wikipedia.run(wikipedia.WikipediaConfig(str(shared_data / ENGLISH), str(tmp_path / "o"),
                                                shard_mb=shard_mb))
    assert not (tmp_path / "o").exists()


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


def write_dump(path, pages):
    """A minimal pages-articles dump: (title, namespace, wikitext) per page."""
    body = "".join(f"<page><title>{title}</title><ns>{ns}</ns><revision><text>{text}</text>"
                   "</revision></page>" for title, ns, text in pages)
    path.write_text(f"<mediawiki>{body}</mediawiki>\n", encoding="utf-8")
    return path


def wikipedia_command(inputs, out, *flags):
    return [PYTHON, "-m", "bert_tf", "wikipedia", f"--input_files={inputs}",
            f"--output_dir={out}", "--noprogress", *flags]


def test_a_rerun_with_another_dump_or_shard_mb_is_refused(tmp_path):
    """Shard names follow the dumps' order: a dump that sorts first, the same path with other
    bytes, or another --shard_mb must not take (or be taken for) the shards already there."""
    beta = write_dump(tmp_path / "b-pages-articles.xml",
                      [("Beta", 0, "Beta is the second letter. It follows alpha.")])
    out = tmp_path / "out"
    run_command(wikipedia_command(beta, out))
    before = {p.name: p.read_bytes() for p in out.glob("wiki*.txt")}
    alpha = write_dump(tmp_path / "a-pages-articles.xml",
                       [("Alpha", 0, "Alpha is the first letter. It comes before beta.")])
    for inputs, flags, change in [
            (f"{alpha},{beta}", [], r"the inputs differ \(were 1 files, now 2"),
            (beta, ["--shard_mb=2"], "--shard_mb was 64.0, now 2.0")]:
        result = run_command(wikipedia_command(inputs, out, *flags), check=False)
        assert result.returncode == 2, result.stderr
        assert re.search(rf"--output_dir={out} was made with other inputs or settings: {change}",
                         result.stderr), result.stderr
    write_dump(beta, [("Beta", 0, "Beta was replaced by another dump at the same path.")])
    result = run_command(wikipedia_command(beta, out), check=False)
    assert result.returncode == 2 and "the inputs differ" in result.stderr
    assert {p.name: p.read_bytes() for p in out.glob("wiki*.txt")} == before

    run_command(wikipedia_command(f"{alpha},{beta}", tmp_path / "both"))
    assert (tmp_path / "both/wiki000-00000.txt").read_text().startswith("Alpha is the first")
    assert (tmp_path / "both/wiki001-00000.txt").read_text().startswith("Beta was replaced")


def test_a_dump_without_articles_is_refused_leaving_nothing(tmp_path):
    dump = write_dump(tmp_path / "talk-pages-articles.xml",
                      [("Talk:Beta", 1, "A discussion page."), ("Gamma", 0, "#REDIRECT [[Beta]]")])
    out = tmp_path / "out"
    result = run_command(wikipedia_command(dump, out), check=False)
    assert result.returncode == 2, result.stderr
    assert f"{dump} holds no articles (of its 2 pages none is a main-namespace page" in (
        result.stderr)
    assert "Traceback" not in result.stderr
    assert [p for p in out.rglob("*")] == []  # no manifest, counts or temporaries left


def test_a_dump_cut_short_is_refused_from_its_last_bytes(tmp_path):
    whole = bz2.compress(b"<mediawiki><page><title>x</title></page></mediawiki>\n" * 50)
    for name, data, complete in [("whole.xml.bz2", whole, True),
                                 ("cut.xml.bz2", whole[:-3], False),
                                 ("cut.xml", b"<mediawiki><page><title>x</title>", False),
                                 ("whole.xml", b"<mediawiki></mediawiki>\n\n", True)]:
        (tmp_path / name).write_bytes(data)
        if complete:
            wikipedia.check_complete(tmp_path / name)
        else:
            with pytest.raises(wikipedia.WikipediaError, match=f"{name} is not a complete "
                               "MediaWiki XML dump: it ends without .*download it again"):
                wikipedia.check_complete(tmp_path / name)
