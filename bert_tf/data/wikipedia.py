"""Wikipedia XML dumps (`*-pages-articles*.xml[.bz2]`) -> documents: one sentence per line, a
blank line between articles, in shards that create_pretraining_data.py reads.

- Streaming: the dump is decompressed and parsed page by page (xml.etree.iterparse, each page
  cleared once read), so memory does not grow with the dump. UTF-16 dumps (with a byte-order
  mark) are decoded by the XML parser; real dumps are UTF-8.
- Kept: main-namespace (ns 0) articles that are neither redirects nor disambiguation pages
  (a disambiguation template such as {{disambiguation}}, {{dab}}, {{hndis}}, or a title ending
  in "(disambiguation)").
- Wikitext -> prose with mwparserfromhell (a maintained wikitext parser with a C tokenizer),
  walking its node tree rather than a home-made regex zoo: templates, tables, <ref>s and other
  non-prose tags, File/Image/Category and interlanguage links, HTML comments, external link URLs
  and bold/italic markup are removed; a link becomes its text; HTML entities are decoded.
- Section titles are dropped (they are not sentences) and each section starts a new paragraph;
  a list item is its own paragraph (a sentence or more). Sections that are lists of sources
  (References, External links, See also, Notes, Further reading, ...) are dropped whole.
  A line that still holds wikitext the parser could not pair up ("{{", "[[", "{|" ...) is
  dropped rather than kept as training text.
- Paragraphs are split into sentences by format_text's splitter (blingfire; CJK as there).
"""

import dataclasses
import glob
import html
import os
import re
import sys
import xml.etree.ElementTree as ET

from absl import flags
from mwparserfromhell.parser import Parser, tokens

import bert_tf
from bert_tf.data import shards, workers
from bert_tf.data.files import (
    InputDataError,
    OutputDirError,
    expand_patterns,
    open_input,
)
from bert_tf.data.format_text import split_sentences
from bert_tf.data.numeric_flags import FlagValueError, check_number
from bert_tf.data.output_dir import check_output_dir

SKIPPED_SECTIONS = frozenset({
    "references", "external links", "see also", "notes", "further reading", "bibliography",
    "sources", "footnotes", "notes and references", "citations", "works cited",
    "literature", "weblinks", "einzelnachweise", "литература", "източници", "външни препратки",
    "вижте също", "бележки"})
DISAMBIGUATION_TEMPLATES = frozenset({
    "disambiguation", "disambig", "dab", "disamb", "hndis", "geodis", "surname",
    "given name", "set index article", "sia", "place name disambiguation", "begriffsklärung",
    "пояснение", "многозначност"})
# HTML tags whose content is prose; every other tag (ref, references, gallery, math, table,
# div, timeline, syntaxhighlight, ...) is dropped with its content.
PROSE_TAGS = frozenset({"b", "i", "u", "s", "em", "strong", "span", "sub", "sup", "small",
                        "big", "abbr", "font", "center", "blockquote", "nowiki", "p", "q",
                        "cite", "del", "ins", "tt", "var", "mark"})
# Tags that start a new paragraph: list items, definition lists, rules, line breaks in lists.
PARAGRAPH_TAGS = frozenset({"li", "dt", "dd", "hr", "p", "blockquote"})
# Link prefixes that are not prose: media, categories, interlanguage links (de:, zh-yue:, ...).
_HIDDEN_LINK = re.compile(r"(file|image|media|category|datei|bild|kategorie|файл|категория|"
                          r"[a-z]{2,3}(-[a-z]+)*)\s*:", re.IGNORECASE)
_LEFTOVER_MARKUP = ("{{", "}}", "[[", "]]", "{|", "|}", "<ref", "</", "/>")
# Brackets emptied by a removed template: "Paris ()" -> "Paris", "( ; born" -> "(born".
_EMPTY_BRACKETS = re.compile(r"\s*\(\s*[,;]?\s*\)")
_BRACKET_SEPARATOR = re.compile(r"\(\s*[,;]?\s*")
# Bold/italic quotes the parser left unpaired (''Iliad'''s): an odd run keeps one apostrophe.
_QUOTES = re.compile(r"'{2,}")
_REFS_AND_COMMENTS = re.compile(r"<ref(?:\s[^>]*)?/>|<ref(?:\s[^>]*)?>.*?</ref\s*>|<!--.*?-->",
                                re.DOTALL | re.IGNORECASE)
_SPACES = re.compile(r"[ \t\u00a0\u2009\u200b]+")


class WikipediaError(InputDataError):
    """The dump cannot be read or parsed; the message names the file."""


def iter_pages(stream, path):
    """Yields (title, namespace, is_redirect, wikitext) per <page> of a dump, clearing each page
    once read so that memory stays flat."""
    context = ET.iterparse(stream, events=("start", "end"))
    try:
        _, root = next(context)
        ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        for event, element in context:
            if event == "end" and element.tag == f"{ns}page":
                yield (element.findtext(f"{ns}title") or "",
                       (element.findtext(f"{ns}ns") or "0").strip(),
                       element.find(f"{ns}redirect") is not None,
                       element.findtext(f"{ns}revision/{ns}text") or "")
                root.clear()
    except ET.ParseError as e:
        raise WikipediaError(f"{path} is not a complete MediaWiki XML dump ({e}): truncated "
                             "(download it again) or not *-pages-articles*.xml[.bz2]") from e
    except (OSError, EOFError) as e:
        raise WikipediaError(f"{path} is corrupt or truncated ({e}); download it again") from e


def is_article(title, namespace, is_redirect, wikitext):
    """Main-namespace, not a redirect, not a disambiguation page."""
    if namespace != "0" or is_redirect or wikitext.lstrip()[:9].upper() == "#REDIRECT":
        return False
    if title.endswith("(disambiguation)"):
        return False
    names = re.findall(r"\{\{\s*([^|}]+?)\s*[|}]", wikitext[-3000:])
    return not any(name.lower() in DISAMBIGUATION_TEMPLATES for name in names)


class _Frame:
    """An open construct of the token stream: its prose so far, and what to do with it."""

    __slots__ = ("kind", "out", "visible", "state", "name", "title", "level")

    def __init__(self, kind, visible=True, state="body", level=0):
        self.kind, self.out, self.visible, self.state = kind, [], visible, state
        self.name, self.title, self.level = "", None, level


class _Walker:
    """Prose from mwparserfromhell's token stream. Its C tokenizer pairs up the markup; its
    Python tree builder costs 10x the tokenizer (profiled on the English slice), so the tokens
    are walked here directly, keeping one frame per open template, link, tag or heading."""

    def __init__(self):
        self.stack = [_Frame("root")]
        self.skip_level = None  # inside a skipped section of this heading level

    def append(self, text):
        top = self.stack[-1]
        if top.state != "body" or (len(self.stack) == 1 and self.skip_level is not None):
            return
        top.out.append(text)

    def push(self, kind, **kwargs):
        self.stack.append(_Frame(kind, **kwargs))

    def pop(self, kind):
        """The innermost frame of `kind`, popped; None if the stream is unbalanced."""
        if len(self.stack) == 1 or self.stack[-1].kind != kind:
            return None
        frame = self.stack.pop()
        return frame if frame.visible else None

    def text(self, token):
        top = self.stack[-1]
        if top.state == "body":  # the common case, kept short: most tokens are text
            if len(self.stack) > 1 or self.skip_level is None:
                top.out.append(token["text"])
        elif top.kind == "tag" and top.state == "head" and not top.name:
            top.name = token["text"].strip().lower()

    def hide(self, kind):
        self.stack.append(_Frame(kind, visible=False))

    def unhide(self, kind):
        if len(self.stack) > 1 and self.stack[-1].kind == kind:
            self.stack.pop()

    def link_separator(self, token):
        top = self.stack[-1]
        if top.kind in ("link", "external"):
            top.title, top.out = "".join(top.out), []

    def link_close(self, token):
        frame = self.pop("link")
        if frame is not None:
            title = frame.title if frame.title is not None else "".join(frame.out)
            if not _HIDDEN_LINK.match(title.strip()):
                self.append("".join(frame.out))

    def external_close(self, token):
        frame = self.pop("external")
        if frame is not None and frame.title is not None:
            self.append("".join(frame.out))

    def heading_close(self, token):
        frame = self.pop("heading")
        if frame is None:
            return
        title = "".join(frame.out).strip().lower()
        if self.skip_level is None or frame.level <= self.skip_level:
            self.skip_level = frame.level if title in SKIPPED_SECTIONS else None
        self.append("\n")

    def entity_close(self, token):
        frame = self.pop("entity")
        if frame is not None:
            self.append(html.unescape(f"&{frame.name}{''.join(frame.out)};"))

    def tag_open_close(self, token):
        top = self.stack[-1]
        if top.kind != "tag":
            return
        if top.state == "head":  # end of <name attributes>: the content follows
            top.visible = top.name in PROSE_TAGS or top.name in PARAGRAPH_TAGS
            top.state = "body"
            if top.name in PARAGRAPH_TAGS:
                self.append("\n")
        else:  # </name>
            top.state = "tail"

    def tag_close(self, token, selfclose=False):
        top = self.stack[-1]
        if top.kind != "tag":
            return
        name, visible = top.name, top.visible
        top.visible = False
        self.pop("tag")
        if selfclose:
            self.append("\n" if name in PARAGRAPH_TAGS else " " if name == "br" else "")
        elif visible:
            self.append("".join(top.out))



def _tag_selfclose(walker, token):
    walker.tag_close(token, selfclose=True)


def _entity_prefix(walker, token):
    walker.stack[-1].name += "#" if type(token).__name__ == "HTMLEntityNumeric" else "x"


_DISPATCH = {  # token class name -> handler(walker, token); other tokens change nothing
    "TemplateOpen": lambda w, t: w.hide("template"),
    "TemplateClose": lambda w, t: w.unhide("template"),
    "ArgumentOpen": lambda w, t: w.hide("argument"),
    "ArgumentClose": lambda w, t: w.unhide("argument"),
    "CommentStart": lambda w, t: w.hide("comment"),
    "CommentEnd": lambda w, t: w.unhide("comment"),
    "Text": _Walker.text,
    "WikilinkOpen": lambda w, t: w.push("link"),
    "WikilinkSeparator": _Walker.link_separator,
    "WikilinkClose": _Walker.link_close,
    "ExternalLinkOpen": lambda w, t: w.push("external"),
    "ExternalLinkSeparator": _Walker.link_separator,
    "ExternalLinkClose": _Walker.external_close,
    "HeadingStart": lambda w, t: w.push("heading", level=t.level),
    "HeadingEnd": _Walker.heading_close,
    "HTMLEntityStart": lambda w, t: w.push("entity"),
    "HTMLEntityNumeric": _entity_prefix,
    "HTMLEntityHex": _entity_prefix,
    "HTMLEntityEnd": _Walker.entity_close,
    "TagOpenOpen": lambda w, t: w.push("tag", state="head"),
    "TagCloseOpen": _Walker.tag_open_close,
    "TagOpenClose": _Walker.tag_open_close,
    "TagCloseClose": _Walker.tag_close,
    "TagCloseSelfclose": _tag_selfclose,
}
# Keyed by class (a dict lookup per token, not a name lookup).
_HANDLERS = {getattr(tokens, name): handler for name, handler in _DISPATCH.items()}
_TOKENIZER = Parser()._tokenizer


def wikitext_to_prose(wikitext):
    """Wikitext -> plain text, paragraphs separated by newlines (not yet cleaned up)."""
    walker = _Walker()
    handlers = _HANDLERS
    for token in _TOKENIZER.tokenize(wikitext, 0, False):
        handler = handlers.get(token.__class__)
        if handler is not None:
            handler(walker, token)
    return "".join(walker.stack[0].out)


def wikitext_to_paragraphs(wikitext):
    """Wikitext of an article -> list of prose paragraphs."""
    # <ref>s and comments hold a third of an article's markup (citation templates) and are
    # never prose: cutting them out first saves a third of the tokens (bench/wikipedia.py).
    text = wikitext_to_prose(_REFS_AND_COMMENTS.sub("", wikitext))
    text = _QUOTES.sub(lambda m: "'" * (len(m.group()) % 2), _SPACES.sub(" ", text))
    text = _BRACKET_SEPARATOR.sub("(", _EMPTY_BRACKETS.sub("", text))
    paragraphs = []
    for line in text.split("\n"):
        line = line.strip()
        # Dropped: empty lines, rows of a table the parser did not pair up, unpaired markup.
        if line and line[0] not in "|!" and not any(m in line for m in _LEFTOVER_MARKUP):
            paragraphs.append(line)
    return paragraphs


def article_sentences(page):
    """(title, namespace, is_redirect, wikitext) -> sentences of the article, [] if skipped."""
    if not is_article(*page):
        return []
    return [s for p in wikitext_to_paragraphs(page[3]) for s in split_sentences(p)]


# bzip2's end-of-stream marker (the digits of sqrt(pi)): 48 bits, then a 32-bit CRC and 0-7
# bits of padding end the file, not byte-aligned.
_BZIP2_END = 0x177245385090


def _cut_short(path):
    """What a complete file of path's format ends with and this one lacks, or None."""
    suffix = os.path.splitext(str(path))[1].lower()
    if suffix == ".gz":  # gzip has no end marker: read it through
        with open_input(path) as f:
            try:
                while f.read(1 << 24):
                    pass
            except (OSError, EOFError) as e:
                return f"the end of its gzip stream ({e})"
        return None
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - 64))
        tail = f.read()
    if suffix == ".bz2":
        value = int.from_bytes(tail[-11:], "big")
        if not any((value >> (32 + pad)) & (2**48 - 1) == _BZIP2_END for pad in range(8)):
            return "bzip2's end-of-stream marker"
    elif suffix == ".xz":
        if not tail.endswith(b"YZ"):
            return "xz's stream footer"
    elif not any(end in tail for end in (b"</mediawiki>", "</mediawiki>".encode("utf-16-le"))):
        return "</mediawiki>"
    return None


def check_complete(path):
    """Refuses a dump cut short (an interrupted download) before anything is written for it,
    from its last bytes (a .gz is read through: gzip has no end marker)."""
    missing = _cut_short(path)
    if missing:
        raise WikipediaError(f"{path} is not a complete MediaWiki XML dump: it ends without "
                             f"{missing}, so it was cut short; download it again")


def iter_dump(path):
    """Streams the pages of a dump file (.xml, .xml.bz2, .gz, .xz)."""
    with open_input(path) as stream:
        yield from iter_pages(stream, path)


# --------------------------------------------------------------------------- dump -> shards

# Pages handed to the workers at once: enough to keep them busy, few enough that memory stays
# bounded (Pool.imap would read the whole dump ahead into its task queue).
PAGES_PER_WORKER_BATCH = 64


def _batches(iterable, size):
    batch = []
    for item in iterable:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _completed(output_dir, prefix):
    """Counts of this dump's shards that are done, in order (a rerun continues after them)."""
    done = []
    while shards.is_done(path := shard_path(output_dir, prefix, len(done))):
        done.append(shards.read_counts(path))
    return done


def shard_path(output_dir, prefix, index):
    return os.path.join(output_dir, f"{prefix}-{index:05d}.txt")


class _ShardWriter:
    """Writes documents to PREFIX-NNNNN.txt shards of about `shard_bytes`, each finished (counts
    recorded, renamed) once full, the last one when the dump ends."""

    def __init__(self, output_dir, prefix, shard_bytes, index, source):
        self.output_dir, self.prefix, self.shard_bytes = output_dir, prefix, shard_bytes
        self.index, self.source, self.file, self.counts = index, source, None, None

    def write(self, sentences, pages_end):
        if self.file is None:
            path = shard_path(self.output_dir, self.prefix, self.index)
            self.file = open(shards.temporary_path(path), "w", encoding="utf-8")  # noqa: SIM115
            self.counts = {"source": self.source, "documents": 0, "sentences": 0, "bytes": 0}
        text = "\n".join(sentences) + "\n\n"
        self.file.write(text)
        self.counts["documents"] += 1
        self.counts["sentences"] += len(sentences)
        self.counts["bytes"] += len(text.encode("utf-8"))
        self.counts["pages_end"] = pages_end
        if self.counts["bytes"] >= self.shard_bytes:
            self.finish()

    def finish(self):
        if self.file is not None:
            self.file.close()
            shards.finish(shard_path(self.output_dir, self.prefix, self.index), self.counts)
            self.file = None
            self.index += 1

    def abandon(self):
        if self.file is not None:
            self.file.close()
            os.remove(self.file.name)


def extract_dump(path, output_dir, prefix, shard_bytes, pool=None, progress=None,
                 batch_pages=PAGES_PER_WORKER_BATCH):
    """Streams one dump into document shards PREFIX-NNNNN.txt under output_dir, continuing
    after the shards a previous (killed) run finished. Returns the shards' counts in order.

    The shard boundaries depend on the dump and shard_bytes only, so a resumed run writes the
    same bytes as an uninterrupted one. `pool`: a multiprocessing pool for the wikitext, fed
    `batch_pages` pages at a time.
    """
    done_marker = os.path.join(output_dir, ".counts", f"{prefix}.done.json")
    done = _completed(output_dir, prefix)
    if os.path.exists(done_marker):
        return done
    pages_done = done[-1]["pages_end"] if done else 0
    writer = _ShardWriter(output_dir, prefix, shard_bytes, len(done), os.path.basename(path))
    convert = pool.map if pool is not None else lambda f, xs: list(map(f, xs))
    pages = 0
    try:
        for batch in _batches(enumerate(iter_dump(path)), batch_pages):
            pages += len(batch)
            batch = [(i, page) for i, page in batch if i >= pages_done]
            for (i, _), sentences in zip(batch, convert(article_sentences, [p for _, p in batch]),
                                         strict=True):
                if sentences:
                    writer.write(sentences, i + 1)
            if progress is not None:
                progress.update(len(batch))
        writer.finish()
    except BaseException:
        writer.abandon()
        raise
    if writer.index == 0:
        raise WikipediaError(
            f"{path} holds no articles (of its {pages} pages none is a main-namespace page "
            "that is not a redirect or a disambiguation page); is it a *-pages-articles* "
            "dump? Remove it from --input_files")
    shards.write_json(done_marker, {"shards": writer.index})
    return _completed(output_dir, prefix)


def dump_prefix(index):
    return f"wiki{index:03d}"


def extract_dumps(dumps, output_dir, shard_bytes, num_workers, progress, rank=0, size=1):
    """This rank's dumps (every size-th) -> document shards under output_dir.
    Returns {dump: shard name prefix} for all dumps."""
    from tqdm import tqdm

    os.makedirs(output_dir, exist_ok=True)
    prefixes = {path: dump_prefix(i) for i, path in enumerate(dumps)}
    with tqdm(unit="pages", desc="documents", disable=not progress, file=sys.stderr) as bar:
        pool = workers.pool(num_workers) if num_workers > 1 else None
        try:
            for path in dumps[rank::size]:
                extract_dump(path, output_dir, prefixes[path], shard_bytes, pool, bar,
                             PAGES_PER_WORKER_BATCH * num_workers)
        finally:
            if pool is not None:
                pool.terminate()
    return prefixes


# --------------------------------------------------------------------------- command line


@dataclasses.dataclass
class WikipediaConfig:
    input_files: str  # comma-separated dumps or globs
    output_dir: str
    shard_mb: float = 64.0
    num_workers: int = 1
    progress: bool = True


def define_flags():
    """Defines the flags (defaults from WikipediaConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(WikipediaConfig)}
    flags.DEFINE_string("input_files", None, "Comma-separated dumps or globs: "
                        "*-pages-articles*.xml, .xml.bz2, .gz or .xz.")
    flags.DEFINE_string("output_dir", None, "Where the document shards wikiNNN-NNNNN.txt go.")
    flags.DEFINE_float("shard_mb", d["shard_mb"], "Size of a document shard in MB of text.")
    flags.DEFINE_integer("num_workers", d["num_workers"], "Worker processes for the wikitext.",
                         lower_bound=1)
    flags.DEFINE_bool("progress", d["progress"], "Show a progress bar on stderr.")
    flags.mark_flags_as_required(["input_files", "output_dir"])


def run(config: WikipediaConfig) -> int:
    """Extracts the dumps into document shards; returns the exit status (128 + the signal when
    interrupted). InputDataError, OutputDirError, FlagValueError on bad input.

    The output directory's manifest.json holds the dumps' sha256 and --shard_mb: shard names
    follow the dumps' order, so a rerun with other dumps or another --shard_mb is refused
    rather than taking another dump's shards for its own (shards.claimed_output_dir)."""
    check_number("shard_mb", config.shard_mb, above=0)
    dumps = expand_patterns(config.input_files)
    check_output_dir(config.output_dir, "output_dir", create=True)
    for dump in dumps:
        check_complete(dump)
    expected = {"inputs": shards.input_identities(dumps),
                "settings": {"shard_mb": config.shard_mb}}
    try:
        with (workers.interruptible(),
              shards.claimed_output_dir(config.output_dir, expected, input_paths=dumps)):
            extract_dumps(dumps, config.output_dir, config.shard_mb * 1e6, config.num_workers,
                          config.progress)
    except workers.Interrupted as e:
        return workers.stopped_status("wikipedia", e, "finished shards are kept")
    names = sorted(glob.glob(os.path.join(glob.escape(config.output_dir), "wiki*-*.txt")))
    print(f"{len(dumps)} dump(s) -> {len(names)} document shard(s) under {config.output_dir}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, WikipediaConfig, run,
                        errors=(InputDataError, OutputDirError, FlagValueError), error_status=2)
