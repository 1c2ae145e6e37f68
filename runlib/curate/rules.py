"""The rules of the curation steps that are not C4's, FineWeb's or language identification's
(runlib.curate.filters): Gopher's quality and repetition rules (curate.quality: [gopher]) and the
personal data of curate.pii (e-mail addresses, public IPv4 and IPv6 addresses, phone numbers, payment card
numbers: PII_KINDS); runlib.curate.stage runs them as steps."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable

from runlib.curate.punctuation import PUNCTUATION_SET
from runlib.curate.words import SPACY_VERSION, words

# ------------------------------------------------------------------------------------- Gopher rules
# Rae et al. 2021 (arXiv 2112.11446, Table A1) with the thresholds of datatrove's GopherQualityFilter and
# GopherRepetitionFilter (huggingface/datatrove src/datatrove/pipeline/filters/gopher_quality_filter.py at
# 5c254fa and gopher_repetition_filter.py at f423321), counted as datatrove 0.10 counts them, since FineWeb's
# results come from that code: over the words of spaCy's English tokenizer (runlib.curate.words), in which
# punctuation marks are tokens of their own. The word count and the mean word length are over the words not
# made of datatrove's punctuation only (runlib.curate.punctuation); the '#' and ellipsis ratios, the share of
# words with a letter and the stop words (case as written) are over every word; line fractions are over every
# line, empty ones included; repeated n-grams are their words joined without spaces. GOPHER_RULES names this
# counting, and the spaCy release, in the curate_shard key.

GOPHER_RULES = f"words of spaCy {SPACY_VERSION} blank en, as datatrove 0.10"
GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
GOPHER_TOP_NGRAMS = ((2, 0.20), (3, 0.18), (4, 0.16))
GOPHER_DUP_NGRAMS = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
_PARAGRAPH_SPLIT = re.compile(r"\n{2,}")
_LINE_SPLIT = re.compile(r"\n+")


def gopher_quality_reason(text: str) -> str | None:
    """Why Gopher's quality rules drop `text`, or None to keep it."""
    tokens = words(text)
    if not tokens:
        return "too_few_words"
    kept = [t for t in tokens if not PUNCTUATION_SET.issuperset(t)]
    n = len(kept)
    if n < 50:
        return "too_few_words"  # < 50 words
    if n > 100_000:
        return "too_many_words"  # > 100 000 words
    mean = sum(map(len, kept)) / n
    if not 3 <= mean <= 10:
        return "mean_word_length"  # outside 3..10 characters
    if text.count("#") / len(tokens) > 0.1:
        return "hash_ratio"  # '#' per token > 0.1
    if (text.count("...") + text.count("\u2026")) / len(tokens) > 0.1:
        return "ellipsis_ratio"  # ellipses per token > 0.1
    lines = text.splitlines()
    if sum(line.lstrip().startswith(("\u2022", "-")) for line in lines) / len(lines) > 0.9:
        return "bullet_lines"  # > 90 % of lines start with a bullet
    if sum(line.rstrip().endswith(("...", "\u2026")) for line in lines) / len(lines) > 0.3:
        return "ellipsis_lines"  # > 30 % of lines end with an ellipsis
    if sum(any(c.isalpha() for c in t) for t in tokens) / len(tokens) < 0.8:
        return "alpha_words"  # < 80 % of tokens have a letter
    if len(GOPHER_STOP_WORDS.intersection(tokens)) < 2:
        return "stop_words"  # fewer than 2 of the 8 stop words
    return None


def _duplicate_fraction(parts: list[str]) -> tuple[float, int]:
    """(fraction of parts that repeat an earlier part, characters in those repeats)."""
    seen: set[str] = set()
    dup = dup_chars = 0
    for part in parts:
        if part in seen:
            dup += 1
            dup_chars += len(part)
        else:
            seen.add(part)
    return (dup / len(parts) if parts else 0.0), dup_chars


def gopher_repetition_reason(text: str) -> str | None:
    """Why Gopher's repetition rules drop `text`, or None to keep it."""
    size = len(text)
    if not size:
        return None
    stripped = text.strip()
    frac, chars = _duplicate_fraction(_PARAGRAPH_SPLIT.split(stripped))
    if frac > 0.3:
        return "dup_paragraphs"
    if chars / size > 0.2:
        return "dup_paragraph_chars"
    frac, chars = _duplicate_fraction(_LINE_SPLIT.split(text))
    if frac > 0.3:
        return "dup_lines"
    if chars / size > 0.2:
        return "dup_line_chars"
    # n-grams of words as datatrove's (find_top_duplicate: the top n-gram joined by spaces, times its count;
    # find_all_duplicate: each n-gram joined without spaces, so "ab c" and "a bc" are the same one)
    tokens = words(text)
    for n, limit in GOPHER_TOP_NGRAMS:
        if len(tokens) < n:
            break
        top, count = Counter(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)).most_common(1)[0]
        if len(top) * count / size > limit:
            return f"top_{n}gram"
    for n, limit in GOPHER_DUP_NGRAMS:
        seen: set[str] = set()
        dup_chars, i = 0, 0
        while i < len(tokens) - n + 1:
            gram = "".join(tokens[i : i + n])
            if gram in seen:  # count a repeat once, then skip past it so overlaps are not double-counted
                dup_chars += len(gram)
                i += n
            else:
                seen.add(gram)
                i += 1
        if dup_chars / size > limit:
            return f"dup_{n}gram"
    return None


# ------------------------------------------------------------------------------------------------ PII
# E-mail addresses and public IPv4 addresses as FineWeb did (datatrove's PIIFormatter:
# huggingface/datatrove src/datatrove/pipeline/formatters/pii.py at 98f48eb), with its placeholders; beyond
# it, public IPv6 addresses, phone numbers and payment card numbers. Each kind is replaced by fixed
# placeholders, cycled per document, that the rules themselves do not flag, so masking the masked text
# again changes nothing (where the matches stand apart from their neighbours: spaces, punctuation). The
# passes run in PII_KINDS' order except that IPv6 runs before IPv4 (an IPv4-mapped address holds a dotted
# quad) and cards before phones; each pass sees the text the previous ones masked.

PII_KINDS = ("email", "ipv4", "ipv6", "phone", "card")

# a match starts with a word character at a word's start, so that it never takes the '/' or '+' between two
# addresses (a@b.com/c@d.com) and masking never glues a placeholder onto the word before it
EMAIL_RE = re.compile(
    r"\b(?<!\w)[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,63}\b",
    re.IGNORECASE,
)
IPV4_RE = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\w|\.\d)"
)
EMAIL_PLACEHOLDERS = ("email@example.com", "firstname.lastname@example.org")
# datatrove's; they are routable addresses, so an address equal to one of them is taken for a placeholder
IP_PLACEHOLDERS = (
    "22.214.171.124",
    "126.96.36.199",
    "188.8.131.52",
    "184.108.40.206",
    "220.127.116.11",
    "18.104.22.168",
)
# 2001:db8::/32 is reserved for documentation (RFC 3849), so _is_public_ipv6 never flags these
IPV6_PLACEHOLDERS = ("2001:db8::1", "2001:db8::2", "2001:db8::3")
# 555-0100..555-0199 are the NANP's numbers reserved for fiction (NANPA); without an area code PHONE_RE
# does not match them
PHONE_PLACEHOLDERS = ("555-0100", "555-0123", "555-0199")
# Luhn-valid but in no issuer's range (a leading 0 is ISO/IEC 7812-1's MII for ISO/TC 68 assignments)
CARD_PLACEHOLDERS = ("0000 0000 0000 0000",)
_EMAIL_SKIP = frozenset(EMAIL_PLACEHOLDERS)
# a placeholder that a hyphen joins to the next address (a@b.com-c@d.com) reads as one longer domain
_EMAIL_SKIP_PREFIXES = tuple(p + "-" for p in EMAIL_PLACEHOLDERS)
_IPV4_SKIP = frozenset(IP_PLACEHOLDERS)

# IPv6 text forms (RFC 4291 section 2.2): eight groups of 1-4 hex digits, one run of zero groups written
# '::', the last 32 bits optionally as a dotted quad; hex is case-insensitive (RFC 5952 section 4.3 only
# recommends lower case). The regex takes a run of hex groups and colons; ipaddress decides what is valid.
IPV6_RE = re.compile(r"(?<![\w:.])[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,8}(?:\.\d{1,3}){0,3}(?![\w:]|\.\d)", re.IGNORECASE)
# Public: in 2000::/3, the global unicast space IANA allocates from (RFC 4291 section 2.4), and not in
# the special-purpose registry (RFC 6890, ipaddress's is_global: 2001:db8::/32 per RFC 3849, 2001::/23,
# ...); loopback ::1, link-local fe80::/10, ULA fc00::/7 and multicast ff00::/8 lie outside 2000::/3.
# 3fff::/20 is documentation too (RFC 9637), newer than some Pythons' tables. An IPv4-mapped address
# (::ffff:0:0/96, RFC 4291 section 2.5.5.2) is public when its IPv4 address is (and is no placeholder).
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_IPV6_DOCUMENTATION = ipaddress.IPv6Network("3fff::/20")

# Phone numbers, two written forms; bare digit runs and 7-digit local numbers are never taken.
# International (ITU-T E.123's notation: '+', the country code, digit groups set off by spaces; hyphens,
# dots, a bracketed area code and the national trunk prefix '(0)' are common too, the '(0)' not counted):
# a country code of 1-3 digits that does not start with 0 and at most 15 digits in all (ITU-T E.164); at
# least 9 (shorter numbers are rare, and "+3.11.7", "+2024-05-01" or "+10 000 000" are not numbers to
# call), 10 when the digits are not grouped, and not a number in thousands groups ("+100 000 000") of up to
# 10 digits. North American (the NANP numbering plan, NANPA): area code NXX, central office code NXX, line
# number XXXX, N 2-9; area codes with 9 as the middle digit are reserved for expansion and N11 codes are
# service codes (211, 911), neither area nor office codes; the country code 1 may lead ("1-800-..."). The
# two separators of 415-555-0132 must agree. A 7-digit local number (555-0132) is too like other numbers
# to take. The lookarounds keep a match out of longer digit runs, dates (2024-05-01) and versions.
_PHONE_INTL = r"(?P<intl>\+[1-9]\d{0,2}(?:[ .\-]?\(0\))?(?:[ .\-]?\(\d{1,4}\)|[ .\-]?\d{1,8}){1,7})"
_PHONE_NANP = (
    r"(?P<nanp>(?:1[ .\-]?)?(?:\((?P<npa1>[2-9]\d\d)\) ?|(?P<npa2>[2-9]\d\d)(?P<sep>[ .\-]))"
    r"(?P<nxx>[2-9]\d\d)(?(sep)(?P=sep)|[ .\-])\d{4})"
)
PHONE_RE = re.compile(rf"(?<![\w+])(?<!\d[.\-])(?:{_PHONE_INTL}|{_PHONE_NANP})(?!\w|[.\-]\d)")
_THOUSANDS = re.compile(r"\d{1,3}([ .])\d{3}(?:\1\d{3})*")

# Payment card numbers (ISO/IEC 7812-1): 13-19 digits, written whole or in groups (4-4-4-4, Amex 4-6-5)
# with one kind of separator (a space or a hyphen), whose last digit is the Luhn check digit (ISO/IEC
# 7812-1 Annex B) and whose issuer identification number (the leading digits) lies in a range a card
# network issues from, at one of that network's lengths: one random 16-digit number in ten passes Luhn,
# few of them start like a card (ISBN-13s start 978/979, millisecond timestamps 1). ISO/IEC 7812 defines
# the IIN and registers issuers; the ranges are the networks' published IIN ranges,
# (first prefix, last prefix, lengths):
CARD_RE = re.compile(r"(?<![\w])(?<!\d[ .,\-])(?:\d{4}([ \-])\d{3,6}(?:\1\d{3,6}){1,3}|\d{13,19})(?![\w]|[.,\-]\d)")
_LONG = tuple(range(16, 20))
CARD_ISSUERS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("4", "4", (13, 16, 19)),  # Visa
    ("51", "55", (16,)),  # Mastercard
    ("2221", "2720", (16,)),  # Mastercard's 2-series
    ("34", "34", (15,)),  # American Express
    ("37", "37", (15,)),  # American Express
    ("6011", "6011", _LONG),  # Discover
    ("644", "649", _LONG),  # Discover
    ("65", "65", _LONG),  # Discover
    ("300", "305", (14, *_LONG)),  # Diners Club International
    ("36", "36", (14, *_LONG)),  # Diners Club International
    ("38", "39", (14, *_LONG)),  # Diners Club International
    ("3528", "3589", _LONG),  # JCB
    ("62", "62", _LONG),  # UnionPay
    ("2200", "2204", _LONG),  # Mir
    ("5018", "5018", (13, 14, 15, *_LONG)),  # Maestro
    ("5020", "5020", (13, 14, 15, *_LONG)),  # Maestro
    ("5038", "5038", (13, 14, 15, *_LONG)),  # Maestro
    ("5893", "5893", (13, 14, 15, *_LONG)),  # Maestro
    ("6304", "6304", (13, 14, 15, *_LONG)),  # Maestro
    ("6759", "6759", (13, 14, 15, *_LONG)),  # Maestro
    ("6761", "6763", (13, 14, 15, *_LONG)),  # Maestro
)


def _is_public_ip(text: str) -> bool:
    try:
        return ipaddress.IPv4Address(text).is_global
    except ValueError:
        return False


def _is_public_ipv6(text: str) -> bool:
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return False
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped) not in _IPV4_SKIP and address.ipv4_mapped.is_global
    return address in _GLOBAL_UNICAST and address not in _IPV6_DOCUMENTATION and address.is_global


def _is_email(m: re.Match[str]) -> bool:
    found = m[0].lower()
    return found not in _EMAIL_SKIP and not found.startswith(_EMAIL_SKIP_PREFIXES)


def _is_phone(m: re.Match[str]) -> bool:
    intl: str | None = m.group("intl")
    if intl is None:  # NANP
        npa: str = m.group("npa1") or m.group("npa2")
        nxx: str = m.group("nxx")
        return npa[1] != "9" and npa[1:] != "11" and nxx[1:] != "11"
    body = intl[1:].replace("(0)", "")
    digits = sum(c.isdigit() for c in body)
    if body.isdigit():
        return 10 <= digits <= 15
    return 9 <= digits <= 15 and not (digits <= 10 and _THOUSANDS.fullmatch(body))


def luhn_ok(digits: str) -> bool:
    """The Luhn check (ISO/IEC 7812-1 Annex B): from the right, every second digit doubled (less 9 when over
    9), and the sum of all a multiple of 10."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _is_card(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19:
        return False
    issued = any(lo <= digits[: len(lo)] <= hi and len(digits) in lengths for lo, hi, lengths in CARD_ISSUERS)
    return issued and luhn_ok(digits)


def _ipv6_sub(counts: dict[str, int]) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        found, tail = m.group(0), ""
        if found.endswith(":") and not found.endswith("::"):  # a colon that ends a sentence's clause
            found, tail = found[:-1], ":"
        if not _is_public_ipv6(found):
            return m.group(0)
        counts["ipv6"] += 1
        return IPV6_PLACEHOLDERS[(counts["ipv6"] - 1) % len(IPV6_PLACEHOLDERS)] + tail

    return sub


def _sub(
    counts: dict[str, int], kind: str, placeholders: tuple[str, ...], is_pii: Callable[[re.Match[str]], bool]
) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        if not is_pii(m):
            return m.group(0)
        counts[kind] += 1
        return placeholders[(counts[kind] - 1) % len(placeholders)]

    return sub


def mask_pii(text: str) -> tuple[str, dict[str, int]]:
    """text with its personal data replaced by placeholders, and how many of each kind (PII_KINDS' keys)."""
    counts = dict.fromkeys(PII_KINDS, 0)
    if "@" in text:
        text = EMAIL_RE.sub(_sub(counts, "email", EMAIL_PLACEHOLDERS, _is_email), text)
    if ":" in text:
        text = IPV6_RE.sub(_ipv6_sub(counts), text)
    if "." in text:
        public = _sub(counts, "ipv4", IP_PLACEHOLDERS, lambda m: m[0] not in _IPV4_SKIP and _is_public_ip(m[0]))
        text = IPV4_RE.sub(public, text)
    text = CARD_RE.sub(_sub(counts, "card", CARD_PLACEHOLDERS, lambda m: _is_card(m[0])), text)
    text = PHONE_RE.sub(_sub(counts, "phone", PHONE_PLACEHOLDERS, _is_phone), text)
    return text, counts


def find_pii(text: str) -> dict[str, int]:
    """How many of each kind of personal data text holds (PII_KINDS' keys), as mask_pii counts them."""
    return mask_pii(text)[1]
