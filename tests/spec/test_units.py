import pytest

from runlib.spec.units import BatchSize, Duration, format_count, parse_batch_size, parse_count, parse_duration


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (4096, 4096),
        ("4K", 4000),
        ("2.5M", 2_500_000),
        ("300B", 300_000_000_000),
        ("15T", 15 * 10**12),
        ("10G", 10**10),
        ("4Mi", 4 * 2**20),
        ("4Ki", 4096),
        ("1.5Ki", 1536),
        (2.0, 2),
        ("1e3", 1000),
    ],
)
def test_parse_count(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("bad", ["4X", "abc", "", "1.5", "0.3K7", True, [1], 2.5, "-5K"])
def test_parse_count_rejects(bad):
    with pytest.raises(ValueError):
        parse_count(bad)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8B tokens", Duration(8e9, "tokens")),
        ("2000 steps", Duration(2000, "steps")),
        ("3%", Duration(3.0, "percent")),
        ("0.5 %", Duration(0.5, "percent")),
        ("4Mi tokens", Duration(4 * 2**20, "tokens")),
    ],
)
def test_parse_duration(text, value):
    assert parse_duration(text) == value


@pytest.mark.parametrize("bad", ["8B", "tokens", "5 days", 2000, "x%", "-1%"])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_batch_size():
    assert parse_batch_size("4Mi tokens") == BatchSize(4 * 2**20, "tokens")
    assert parse_batch_size(512) == BatchSize(512, "sequences")
    assert parse_batch_size("512 sequences").tokens(2048) == 512 * 2048
    with pytest.raises(ValueError):
        parse_batch_size("4 bananas")


def test_format_count():
    assert format_count(4 * 10**12) == "4T"
    assert format_count(4194304) == "4.19M"
    assert format_count(999) == "999"
