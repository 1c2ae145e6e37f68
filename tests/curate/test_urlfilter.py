"""runlib.curate.urlfilter: blocklist files (UT1 layout, comments, normalization, refused files) and the
reason a URL is dropped (listed domains with their subdomains, listed URLs, banned words as whole words)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlib.curate.urlfilter import (
    MAX_LINE_BYTES,
    Blocklist,
    blocklist_files,
    normalize_domain,
    normalize_url_entry,
    read_blocklist,
    url_host,
    url_reason,
)
from runlib.errors import UserError

FIELD = "data.sources.web.curate.url_filter.blocklist"
NONE: frozenset[str] = frozenset()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def domains(*names: str) -> Blocklist:
    return Blocklist(domains=frozenset(normalize_domain(n) for n in names))


@pytest.fixture
def ut1(tmp_path: Path) -> Path:
    """A UT1-style folder: two categories, each with domains (and one with urls), plus UT1's non-list files."""
    root = tmp_path / "blacklists"
    write(root / "README", "UT1 blacklists, see http://dsi.ut-capitole.fr/blacklists/\n")
    write(root / "global_usage", "NAME: adult\nDEFAULT_TYPE: black\n")
    write(root / "adult" / "domains", "# adult sites\n\nporn-example.com\nWWW.Adult-Example.NET.\n*.wild.example\n")
    write(root / "adult" / "urls", "www.host.example/adult/folder/\nother.example/page.html\n")
    write(root / "adult" / "usage", "black\nadult\n")
    write(root / "adult" / "expressions", "(^|[-/_.])(porn)([-/_.]|$)\n")
    write(root / "gambling" / "domains", "  casino-example.org  \r\n#casino-ignored.org\r\n")
    return root


# -------------------------------------------------------------------------------------------------- domains


def test_a_listed_domain_blocks_itself_and_its_subdomains():
    block = domains("example.com")
    assert url_reason("http://example.com/", block, NONE) == "blocked_domain"
    assert url_reason("https://a.b.example.com/page", block, NONE) == "blocked_domain"
    assert url_reason("https://sub.example.com", block, NONE) == "blocked_domain"


@pytest.mark.parametrize(
    "url",
    [
        "http://notexample.com/",
        "http://example.com.au/",
        "http://example.co/",
        "http://example.community/",
        "http://exampleXcom.org/",
        "http://example.org/example.com",  # the listed name in the path, not the host
        "http://com/",  # a parent of the listed domain is not blocked
    ],
)
def test_lookalikes_of_a_listed_domain_are_kept(url):
    assert url_reason(url, domains("example.com"), NONE) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://WWW.EXAMPLE.COM/",
        "http://www.example.com:8080/path",
        "http://user:secret@example.com/",
        "http://user@www.example.com:443/x",
        "http://example.com./",
        "https://Example.Com.:8443/?q=1#frag",
        "  http://example.com/  ",
    ],
)
def test_case_www_port_userinfo_and_trailing_dot_do_not_hide_a_listed_host(url):
    assert url_reason(url, domains("example.com"), NONE) == "blocked_domain"


def test_domain_entries_are_normalized():
    assert normalize_domain("WWW.Example.COM.") == "example.com"
    assert normalize_domain("*.example.com") == "example.com"
    assert normalize_domain(".example.com") == "example.com"
    assert normalize_domain("www.*.example.com") == "example.com"
    assert normalize_domain("Bücher.de") == "xn--bcher-kva.de"
    assert normalize_domain("[2001:db8::1]") == "2001:db8::1"


def test_internationalized_hosts_match_in_punycode_either_way():
    assert url_host("http://Bücher.DE/") == "xn--bcher-kva.de"
    listed_unicode = domains("bücher.de")
    listed_puny = domains("xn--bcher-kva.de")
    for block in (listed_unicode, listed_puny):
        assert url_reason("http://bücher.de/katalog", block, NONE) == "blocked_domain"
        assert url_reason("http://shop.xn--bcher-kva.de/", block, NONE) == "blocked_domain"
        assert url_reason("http://buecher.de/", block, NONE) is None


def test_an_entry_the_idna_codec_refuses_is_kept_as_lowercase_text():
    label = "ü" * 70  # longer than a DNS label may be: the idna codec raises
    assert normalize_domain(f"{label.upper()}.example") == f"{label}.example"


def test_ip_literal_hosts_are_compared_as_written():
    block = domains("192.0.2.1", "2001:db8::1")
    assert url_host("http://[2001:DB8::1]:8080/") == "2001:db8::1"
    assert url_reason("http://192.0.2.1/x", block, NONE) == "blocked_domain"
    assert url_reason("http://[2001:db8::1]/", block, NONE) == "blocked_domain"
    assert url_reason("http://192.0.2.1/", domains("0.2.1"), NONE) is None  # an IP has no parent domains
    assert url_reason("http://192.0.2.10/", block, NONE) is None


# -------------------------------------------------------------------------------------------------- URLs


def test_url_entries_block_the_page_and_what_lies_under_a_listed_folder():
    block = Blocklist(urls=frozenset({normalize_url_entry("www.host.example/adult/folder/")}))
    assert normalize_url_entry("http://WWW.Host.Example:80/adult/folder/") == "host.example/adult/folder"
    assert url_reason("http://host.example/adult/folder", block, NONE) == "blocked_url"
    assert url_reason("https://www.host.example/adult/folder/", block, NONE) == "blocked_url"
    assert url_reason("https://host.example/adult/folder/page.html?x=1", block, NONE) == "blocked_url"
    assert url_reason("https://host.example/adult/folders", block, NONE) is None
    assert url_reason("https://host.example/adult", block, NONE) is None
    assert url_reason("https://host.example/", block, NONE) is None
    assert url_reason("https://sub.host.example/adult/folder", block, NONE) is None


def test_a_url_entry_with_a_query_matches_that_query_only():
    block = Blocklist(urls=frozenset({normalize_url_entry("forum.example/view.php?id=7")}))
    assert url_reason("http://forum.example/view.php?id=7", block, NONE) == "blocked_url"
    assert url_reason("http://forum.example/view.php?id=8", block, NONE) is None


# -------------------------------------------------------------------------------------------------- words


def test_banned_words_match_whole_words_of_the_url_only():
    banned = frozenset({"sex"})
    assert url_reason("https://example.com/sex-video", Blocklist(), banned) == "banned_word"
    assert url_reason("https://SEX.example.com/", Blocklist(), banned) == "banned_word"
    assert url_reason("https://example.com/a?tag=sex&p=2", Blocklist(), banned) == "banned_word"
    assert url_reason("https://essex.ac.uk/", Blocklist(), banned) is None
    assert url_reason("https://example.com/sexton/sussex", Blocklist(), banned) is None


def test_reasons_are_checked_in_order():
    block = Blocklist(domains=frozenset({"bad.example"}), urls=frozenset({"ok.example/sex"}))
    banned = frozenset({"sex"})
    assert url_reason("mailto:sex@bad.example", block, banned) == "bad_url"
    assert url_reason("http://bad.example/sex", block, banned) == "blocked_domain"
    assert url_reason("http://ok.example/sex", block, banned) == "blocked_url"
    assert url_reason("http://ok.example/sex-shop", block, banned) == "banned_word"
    assert url_reason("http://ok.example/", block, banned) is None


@pytest.mark.parametrize(
    "url",
    [
        "mailto:x",
        "",
        "   ",
        "http://",
        "https:///path",
        "http://:80/",
        "ftp://example.com/",
        "example.com/page",
        "http://[::1",
    ],
)
def test_urls_without_an_http_host_are_bad(url):
    assert url_host(url) is None
    assert url_reason(url, Blocklist(), NONE) == "bad_url"


# -------------------------------------------------------------------------------------------------- files


def test_a_ut1_folder_reads_domains_and_urls_of_every_category(ut1):
    files = blocklist_files(str(ut1), FIELD)
    assert [f.relative_to(ut1).as_posix() for f in files] == ["adult/domains", "adult/urls", "gambling/domains"]
    block = read_blocklist([ut1], FIELD)
    assert block.domains == {"porn-example.com", "adult-example.net", "wild.example", "casino-example.org"}
    assert block.urls == {"host.example/adult/folder", "other.example/page.html"}
    assert url_reason("http://m.porn-example.com/", block, NONE) == "blocked_domain"
    assert url_reason("http://casino-example.org/", block, NONE) == "blocked_domain"
    assert url_reason("http://casino-ignored.org/", block, NONE) is None  # a comment line
    assert url_reason("http://other.example/page.html", block, NONE) == "blocked_url"
    assert url_reason("http://dsi.ut-capitole.fr/blacklists/", block, NONE) is None  # README not read
    assert url_reason("http://black/", block, NONE) is None  # usage not read


def test_files_read_from_the_list_of_resolved_paths_are_the_same(ut1):
    assert read_blocklist(blocklist_files(str(ut1), FIELD), FIELD) == read_blocklist([ut1], FIELD)


def test_a_single_file_and_entries_with_a_slash_are_url_entries(tmp_path):
    path = write(tmp_path / "blocked.txt", "\ufeff# mine\n\nExample.com\nsite.example/private/\n\n")
    assert blocklist_files(str(path), FIELD) == [path]
    block = read_blocklist([path], FIELD)
    assert block == Blocklist(domains=frozenset({"example.com"}), urls=frozenset({"site.example/private"}))


def test_a_folder_is_read_recursively_in_sorted_order_without_following_folder_symlinks(tmp_path):
    root = tmp_path / "lists"
    write(root / "b" / "domains", "b.example\n")
    write(root / "a" / "z" / "domains", "z.example\n")
    write(root / "a" / "domains", "a.example\n")
    (root / "alias").symlink_to(root / "a", target_is_directory=True)
    (root / "linked").symlink_to(root / "b" / "domains")
    files = blocklist_files(str(root), FIELD)
    assert [f.relative_to(root).as_posix() for f in files] == ["a/domains", "a/z/domains", "b/domains", "linked"]


def test_a_binary_blocklist_file_is_a_user_error_naming_the_field(tmp_path):
    path = tmp_path / "lists" / "adult" / "domains"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")  # a gzip header: blacklists.tar.gz unpacked?
    with pytest.raises(UserError) as err:
        read_blocklist([tmp_path / "lists"], FIELD)
    message = str(err.value)
    assert FIELD in message and str(path) in message and "fix:" in message and "NUL" in message


def test_a_blocklist_file_that_is_not_utf8_is_a_user_error_with_its_line(tmp_path):
    path = tmp_path / "domains"
    path.write_bytes(b"good.example\nb\xe9b\xe9.example\n")  # Latin-1
    with pytest.raises(UserError, match=rf"{FIELD}: blocklist .*domains:2: not UTF-8 text.*fix:"):
        read_blocklist([path], FIELD)


def test_an_overlong_line_is_a_user_error(tmp_path):
    path = tmp_path / "domains"
    path.write_text("ok.example\n" + "a" * (MAX_LINE_BYTES + 1) + "\n")
    with pytest.raises(UserError, match=rf"{FIELD}: blocklist .*domains:2: line longer than {MAX_LINE_BYTES}"):
        read_blocklist([path], FIELD)


def test_a_too_large_file_is_a_user_error(tmp_path, monkeypatch):
    from runlib.curate import urlfilter

    monkeypatch.setattr(urlfilter, "MAX_FILE_BYTES", 16)
    path = write(tmp_path / "domains", "a.example\nb.example\nc.example\n")
    with pytest.raises(UserError, match=rf"{FIELD}: blocklist .*domains is larger than"):
        read_blocklist([path], FIELD)


def test_a_missing_path_is_a_user_error_naming_the_field(tmp_path):
    missing = tmp_path / "no-such-list"
    with pytest.raises(UserError, match=rf"{FIELD}: blocklist .*no-such-list does not exist; fix:"):
        blocklist_files(str(missing), FIELD)
    with pytest.raises(UserError, match=rf"{FIELD}: blocklist .*no-such-list does not exist"):
        read_blocklist([missing], FIELD)


def test_a_folder_without_list_files_is_a_user_error(tmp_path):
    root = tmp_path / "empty"
    write(root / "README", "nothing here\n")
    (root / "sub").mkdir()
    with pytest.raises(UserError, match=rf"{FIELD}: blocklist folder .*empty holds no list files"):
        blocklist_files(str(root), FIELD)
