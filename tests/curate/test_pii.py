"""Personal data (curate.pii): what each kind's rule takes and what it leaves, as a table of cases; masking
twice changes nothing; the counts per kind."""

import random

import pytest

from runlib.curate.rules import (
    CARD_PLACEHOLDERS,
    EMAIL_PLACEHOLDERS,
    IP_PLACEHOLDERS,
    IPV6_PLACEHOLDERS,
    PHONE_PLACEHOLDERS,
    PII_KINDS,
    find_pii,
    luhn_ok,
    mask_pii,
)

# (text, the kind found once in it): each found item stands inside a sentence, so the lookarounds are tested
FOUND = [
    ("write to jane.doe@mail.com today", "email"),
    ("the resolver 8.8.8.8 answered", "ipv4"),
    ("full form 2a00:1450:4001:0829:0000:0000:0000:200e here", "ipv6"),
    ("compressed 2606:4700:4700::1111 here", "ipv6"),
    ("upper case 2A00:1450:4001:82A::200E here", "ipv6"),
    ("IPv4-mapped ::ffff:8.8.8.8 here", "ipv6"),
    ("in a URL http://[2001:4860:4860::8888]:443/ here", "ipv6"),
    ("ends a clause 2606:4700::1111: then more", "ipv6"),
    ("London +44 20 7946 0958.", "phone"),
    ("San Francisco +1-415-555-0132, ask for Ann", "phone"),
    ("Berlin +49 (0)30 1234567 (office)", "phone"),
    ("Paris +33 1 23 45 67 89", "phone"),
    ("tel:+14155550132", "phone"),
    ("+1 (415) 555-0132 is the desk", "phone"),
    ("call (415) 555-0132 now", "phone"),
    ("call 415-555-0132 now", "phone"),
    ("call 415.555.0132 now", "phone"),
    ("call 415 555 0132 now", "phone"),
    ("toll free 1-800-555-0199.", "phone"),
    ("Visa 4111 1111 1111 1111 exp 12/25", "card"),
    ("Visa 4111-1111-1111-1111", "card"),
    ("Visa 4000123456789017", "card"),
    ("Mastercard 5555 5555 5555 4444", "card"),
    ("Mastercard 2-series 2223003122003222", "card"),
    ("Amex 3782 822463 10005", "card"),
    ("Amex 378282246310005", "card"),
    ("Discover 6011 1111 1111 1117", "card"),
    ("Diners 30569309025904", "card"),
    ("JCB 3530111333300000", "card"),
    ("UnionPay 6200000000000005", "card"),
]

# texts in which nothing is personal data
NOT_FOUND = [
    "released on 2024-05-01 at 12:30:45",  # a date and a time
    "Python 3.11.7 and build 10.0.19041.1234",  # versions
    "ISBN 978-3-16-148410-0 or 9783161484100",  # ISBN-13, grouped and whole
    "ISBN 0-306-40615-2",  # ISBN-10
    "card-like 4111 1111 1111 1112",  # 16 digits, Luhn fails
    "Luhn-valid 0000 0000 0000 0000 and 8000000000000003",  # no issuer starts with 0 or 8
    "order 1000234567890127",  # Luhn-valid, but 1 is no card issuer's
    "order 4000123456789012345",  # Visa's prefix and length, Luhn fails
    "invoice 12345678901234567890123",  # a long digit run
    "timestamps 1714564800 and 1714564800123",  # Unix seconds and milliseconds
    "price $1,299.99 or 1.299,99 EUR, up +1 000 000 and +100 000 000",  # prices and signed counts
    "+3.11.7 and +2024-05-01 and +1.602e-19",  # a '+' before what is no phone number
    "ISO 8601, ISO/IEC 27001:2013, ISO 3166-1",  # ISO numbers
    "SSN-like 123-45-6789, range 200-300",  # other hyphenated numbers
    "digits 4155550132 and local 555-0132",  # no structure; no area code
    "in longer runs 12-415-555-0132 and 415-555-01323",  # a phone shape inside longer numbers
    "service codes 211-555-0132 and 415-911-0132",  # N11 is no area or office code
    "loopback 127.0.0.1, private 192.168.1.1 and 10.0.0.1",  # IPv4 that is no personal data
    "loopback ::1 and unspecified ::",
    "link-local fe80::1 and fe80::1%eth0",
    "documentation 2001:db8::1 and 2001:0db8:85a3::8a2e:0370:7334, 3fff::1",
    "ULA fc00::1, fd12:3456:789a::1, multicast ff02::1, Teredo 2001::1",
    "mapped private ::ffff:192.168.1.1",
    "UUID 550e8400-e29b-41d4-a716-446655440000",
    "hash d41d8cd98f00b204e9800998ecf8427e and sha 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12",
    "MAC 00:1a:2b:3c:4d:5e, C++ std::vector, ratio 1:2:3:4:5:6:7:8, abc::def",
    "placeholders email@example.com 22.214.171.124 2001:db8::1 555-0100 0000 0000 0000 0000",
]


def nonzero(counts):
    return {kind: n for kind, n in counts.items() if n}


@pytest.mark.parametrize("text, kind", FOUND)
def test_found(text, kind):
    assert nonzero(find_pii(text)) == {kind: 1}
    masked, counts = mask_pii(text)
    assert nonzero(counts) == {kind: 1} and masked != text


@pytest.mark.parametrize("text", NOT_FOUND)
def test_not_found(text):
    assert nonzero(find_pii(text)) == {}
    assert mask_pii(text)[0] == text


@pytest.mark.parametrize("text", [text for text, _ in FOUND] + NOT_FOUND)
def test_masking_twice_changes_nothing(text):
    masked, _ = mask_pii(text)
    assert mask_pii(masked) == (masked, dict.fromkeys(PII_KINDS, 0))


def test_masking_mixed_text_twice_changes_nothing():
    """Items of every kind joined by spaces and punctuation, in random orders."""
    items = [text for text, _ in FOUND] + NOT_FOUND
    separators = [" ", ", ", "; ", "\n", " / ", " (", ") ", ": ", " - "]
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice(items) + rng.choice(separators) for _ in range(rng.randint(1, 6)))
        masked, _ = mask_pii(text)
        assert mask_pii(masked) == (masked, dict.fromkeys(PII_KINDS, 0)), text


def test_counts_per_kind_and_placeholders():
    text = (
        "Mail a@b.com or c.d@e.org (cc f@g.net); hosts 8.8.8.8, 1.1.1.1, 192.168.0.1; v6 2606:4700::1111 and "
        "::1; phones +44 20 7946 0958, (415) 555-0132; cards 4111 1111 1111 1111, 378282246310005, "
        "4111 1111 1111 1112."
    )
    counts = {"email": 3, "ipv4": 2, "ipv6": 1, "phone": 2, "card": 2}
    assert list(find_pii(text)) == list(PII_KINDS) and find_pii(text) == counts
    masked, found = mask_pii(text)
    assert found == counts
    assert masked == (
        f"Mail {EMAIL_PLACEHOLDERS[0]} or {EMAIL_PLACEHOLDERS[1]} (cc {EMAIL_PLACEHOLDERS[0]}); "
        f"hosts {IP_PLACEHOLDERS[0]}, {IP_PLACEHOLDERS[1]}, 192.168.0.1; v6 {IPV6_PLACEHOLDERS[0]} and ::1; "
        f"phones {PHONE_PLACEHOLDERS[0]}, {PHONE_PLACEHOLDERS[1]}; cards {CARD_PLACEHOLDERS[0]}, "
        f"{CARD_PLACEHOLDERS[0]}, 4111 1111 1111 1112."
    )
    assert find_pii("") == dict.fromkeys(PII_KINDS, 0)


def test_two_addresses_joined_by_a_slash_keep_it():
    assert mask_pii("a@b.com/c@d.com")[0] == "email@example.com/firstname.lastname@example.org"


@pytest.mark.parametrize(
    "digits, ok",
    [("4111111111111111", True), ("79927398713", True), ("0", True), ("4111111111111112", False), ("1", False)],
)
def test_luhn(digits, ok):
    assert luhn_ok(digits) is ok
