"""URL and domain filtering of web documents: drop a document by its URL before any text is looked at.

Why: FineWeb (Penedo et al. 2024, arXiv 2406.17557, section 3.2, base filtering) removes adult content with a
URL filter first: a blocklist of domains and of URLs (the UT1 blacklists of Université Toulouse 1 Capitole,
dsi.ut-capitole.fr/blacklists) and a list of words banned from URLs. The reference implementation is
datatrove's URLFilter (huggingface/datatrove src/datatrove/pipeline/filters/url_filter.py at 07d4409); this
module re-implements its matching rules without tldextract or a download step.

What:
  blocklist_files(path, field)   a spec path (a file, or a folder read recursively) -> its sorted list files
  read_blocklist(paths, field)   those files -> Blocklist(domains, urls), every entry normalized
  url_reason(url, blocklist, banned_words)
                                 None to keep the document, else why it goes, checked in this order:
    "bad_url"         no http(s) URL with a host
    "blocked_domain"  the host, or a parent domain of it, is listed ('example.com' blocks 'a.b.example.com'
                      but not 'notexample.com')
    "blocked_url"     host + path (no scheme, no leading 'www.') is listed, or a path prefix of it ending at a
                      '/' is (squidGuard urllist semantics: a listed folder blocks what lies under it)
    "banned_word"     a word of the URL (the lowercased URL split on runs of non-alphanumerics) is banned:
                      whole words, so a banned 'sex' drops 'example.com/sex-video' but not 'essex.ac.uk'

List files (the UT1 layout: a folder per category holding `domains` and `urls`) hold one entry per line; blank
lines and lines starting with '#' are skipped. A file named `urls`, or an entry containing '/', gives URL
entries; any other entry is a domain. Reading a folder skips UT1's files that are not lists (`usage`,
`global_usage`, `README`, and the `*expression*` regular-expression files), and does not descend into
symlinked folders (UT1's English category names are symlinks to the French ones).

Deviations from datatrove (07d4409):
  - domains: datatrove compares tldextract's registrable label against the list; here the host and each of
    its parent domains are looked up, which needs no public suffix list and catches listed subdomains too.
  - URL entries: datatrove looks up "domain.subdomain" (its string join of tldextract fields); here host+path
    as UT1 writes its urls files, plus the path prefixes at '/' boundaries, plus host+path?query exactly.
  - only the hard banned words: datatrove's soft banned words (a count threshold) and banned subwords
    (substrings of the squashed URL) are not part of this step; the caller passes the banned words.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from runlib.errors import UserError

MAX_LINE_BYTES = 4096  # a host is at most 253 bytes (RFC 1035 section 2.3.4); a URL entry gets room to spare
MAX_FILE_BYTES = 512 * 1024 * 1024  # UT1's largest list (adult/domains) is well under this
URL_LIST_NAME = "urls"  # UT1: the file of URL entries in a category folder
# UT1 files that are not lists of domains or URLs: usage/global_usage (which categories are black or white),
# README, and the regular expressions for squidGuard's expressionlist (expressions, very_restrictive_expression)
NOT_A_LIST = ("usage", "global_usage", "readme")

# FineWeb's word split (datatrove url_filter.py `normalizer`): runs of anything but ASCII letters and digits
WORD_SPLIT_RE = re.compile(r"[^a-z0-9]+")
HTTP_SCHEMES = ("http", "https")
_WHITESPACE = frozenset(" \t\r\n\v\f")


@dataclass(frozen=True, slots=True)
class Blocklist:
    """Normalized entries: domains ('example.com', punycode for IDNs) and URLs ('example.com/some/path')."""

    domains: frozenset[str] = frozenset()
    urls: frozenset[str] = frozenset()


# -------------------------------------------------------------------------------------------------- files


def blocklist_files(path: str, field: str) -> list[Path]:
    """The list files a spec path names: the file itself, or every list file under the folder in sorted order.
    UserError (naming `field`) when the path is missing, not a file or folder, or a folder with no list file."""
    root = Path(path)
    try:
        st = root.stat()
    except FileNotFoundError:
        raise UserError(
            f"{field}: blocklist {path} does not exist; fix: give a file of blocked domains (one per line) or a "
            "folder of such files, e.g. the UT1 blacklists folder (dsi.ut-capitole.fr/blacklists)"
        ) from None
    except OSError as exc:
        raise UserError(f"{field}: cannot read blocklist {path} ({exc.strerror}); fix its permissions") from None
    if stat.S_ISREG(st.st_mode):
        return [root]
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{field}: blocklist {path} is not a regular file or a folder; fix: give a file or a folder")
    files = _folder_files(root, field)
    if not files:
        raise UserError(
            f"{field}: blocklist folder {path} holds no list files; fix: put files of blocked domains in it (one "
            "per line; UT1 layout: <category>/domains and <category>/urls)"
        )
    return files


def _folder_files(root: Path, field: str) -> list[Path]:
    def refuse(exc: OSError) -> None:
        raise UserError(f"{field}: cannot read blocklist folder {exc.filename} ({exc.strerror}); fix its permissions")

    found: list[tuple[tuple[str, ...], Path]] = []
    for folder, _dirs, names in os.walk(root, onerror=refuse, followlinks=False):
        for name in names:
            if _not_a_list(name):
                continue
            file = Path(folder, name)
            try:
                regular = stat.S_ISREG(file.stat().st_mode)  # a symlink to a regular file counts
            except OSError:
                regular = False  # a dangling symlink, a file gone since the walk listed it
            if regular:
                found.append((file.relative_to(root).parts, file))
    return [file for _parts, file in sorted(found)]


def _not_a_list(name: str) -> bool:
    lower = name.lower()
    return lower in NOT_A_LIST or lower.startswith("readme") or "expression" in lower


def read_blocklist(paths: list[Path], field: str) -> Blocklist:
    """The entries of every file in `paths` (a folder stands for its list files, see blocklist_files).
    UserError naming the file and `field` for a file that is not UTF-8 text, is too large, or has a too long
    line."""
    domains: set[str] = set()
    urls: set[str] = set()
    for given in paths:
        files = blocklist_files(str(given), field) if given.is_dir() else [given]
        for file in files:
            url_file = file.name.lower() == URL_LIST_NAME
            for entry in _entries(file, field):
                if url_file or "/" in entry:
                    url = normalize_url_entry(entry)
                    if url:
                        urls.add(url)
                else:
                    domain = normalize_domain(entry)
                    if domain:
                        domains.add(domain)
    return Blocklist(domains=frozenset(domains), urls=frozenset(urls))


def _entries(file: Path, field: str) -> Iterable[str]:
    """The stripped, non-blank, non-comment lines of a list file."""
    fix = "give a text file of blocked domains, one per line (UTF-8; '#' starts a comment line)"
    try:
        with open(file, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UserError(f"{field}: blocklist {file} is not a regular file; fix: {fix}")
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{field}: blocklist {file} does not exist; fix: {fix}") from None
    except OSError as exc:
        raise UserError(f"{field}: cannot read blocklist {file} ({exc.strerror}); fix its permissions") from None
    if len(data) > MAX_FILE_BYTES:
        raise UserError(
            f"{field}: blocklist {file} is larger than {MAX_FILE_BYTES // 2**20} MiB; fix: split it into several "
            "files in one folder and give the folder"
        )
    if b"\0" in data:
        raise UserError(f"{field}: blocklist {file} is not a text file (it holds NUL bytes); fix: {fix}")
    lines = data.split(b"\n")
    if data and max(map(len, lines)) > MAX_LINE_BYTES:
        lineno = next(i for i, line in enumerate(lines, 1) if len(line) > MAX_LINE_BYTES)
        raise UserError(
            f"{field}: blocklist {file}:{lineno}: line longer than {MAX_LINE_BYTES} bytes; fix: {fix} (is this a "
            "list file?)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise UserError(
            f"{field}: blocklist {file}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start}); fix: {fix}"
        ) from None
    text = text.removeprefix("\ufeff")
    for line in text.split("\n"):
        entry = line.strip()
        if entry and not entry.startswith("#"):
            yield entry


# -------------------------------------------------------------------------------------------------- entries


def normalize_domain(entry: str) -> str:
    """A domain entry as hosts are compared: lowercase, no leading 'www.' / '*.' / '.', no trailing dot,
    punycode for an IDN ('' when nothing is left)."""
    domain = entry.strip().lower().rstrip(".")
    while True:
        for prefix in ("www.", "*.", "."):
            if domain.startswith(prefix):
                domain = domain[len(prefix) :]
                break
        else:
            break
    if domain.startswith("[") and domain.endswith("]"):  # an IPv6 literal written as in a URL
        domain = domain[1:-1]
    return _punycode(domain)


def normalize_url_entry(entry: str) -> str:
    """A URL entry as URLs are compared: lowercase host+path without scheme, port or leading 'www.', no
    trailing '/' ('' when no host is left)."""
    url = entry.strip().lower()
    scheme_end = url.find("://")
    if scheme_end >= 0:
        url = url[scheme_end + 3 :]
    host, slash, path = url.partition("/")
    host = host.rpartition("@")[2]
    if not host.startswith("[") and host.count(":") == 1:
        host = host.partition(":")[0]  # host:port (squidGuard urllists are written without the port)
    elif host.startswith("[") and "]" in host:
        host = host[1 : host.index("]")]
    host = host.rstrip(".").removeprefix("www.")
    host = _punycode(host)
    if not host:
        return ""
    return (host + slash + path).rstrip("/")


def _punycode(host: str) -> str:
    """The ASCII (punycode) spelling of an internationalized host; the text itself when the idna codec
    (IDNA 2003, RFC 3490) refuses it, or when it is ASCII already."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


# -------------------------------------------------------------------------------------------------- URLs


def url_host(url: str) -> str | None:
    """The host of an http(s) URL as blocklists are compared (lowercase, no userinfo or port, no trailing dot,
    punycode for an IDN, an IP literal as written); None when the URL has none."""
    split = _split(url)
    return None if split is None else split[0]


def _split(url: str) -> tuple[str, SplitResult] | None:
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname  # lowercased, userinfo and port removed, IPv6 brackets removed
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return None
    if parts.scheme.lower() not in HTTP_SCHEMES or not host:
        return None
    host = host.rstrip(".")
    if not host or any(ch in _WHITESPACE for ch in host):
        return None
    return _punycode(host), parts


def url_reason(url: str, blocklist: Blocklist, banned_words: frozenset[str]) -> str | None:
    """None to keep the document whose URL this is, else the reason it goes (see the module docstring).
    `banned_words` are lowercase ASCII words, as the URL's words are."""
    split = _split(url)
    if split is None:
        return "bad_url"
    host, parts = split
    if blocklist.domains and _domain_listed(host, blocklist.domains):
        return "blocked_domain"
    if blocklist.urls and _url_listed(host, parts, blocklist.urls):
        return "blocked_url"
    if banned_words and not banned_words.isdisjoint(WORD_SPLIT_RE.split(url.lower())):
        return "banned_word"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _domain_listed(host: str, domains: frozenset[str]) -> bool:
    if host in domains:
        return True
    if _is_ip(host):
        return False  # an IP literal has no parent domains
    start = host.find(".")
    while start >= 0:
        if host[start + 1 :] in domains:
            return True
        start = host.find(".", start + 1)
    return False


def _url_listed(host: str, parts: SplitResult, urls: frozenset[str]) -> bool:
    base = host.removeprefix("www.")
    path = parts.path.lower().rstrip("/")
    if parts.query and f"{base}{path}?{parts.query.lower()}" in urls:
        return True
    if base + path in urls:
        return True
    end = path.rfind("/")
    while end >= 0:  # each folder above, up to the bare host
        if base + path[:end] in urls:
            return True
        end = path.rfind("/", 0, end)
    return False
