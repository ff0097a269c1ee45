"""Dates of imported records, as the exports of ticket and paging tools write them, read to ``YYYY-MM-DD``.

A date is read only when its form says which part is the day, the month and the year: ISO 8601 (with or without a
time and zone), ``YYYY/MM/DD`` and ``YYYY.MM.DD``, Korean ``2024년 3월 5일``, a month written as a word (Jira's
``05/Mar/24 2:22 PM``, ``5 March 2024``, ``Mar 5, 2024``), e-mail style (``Tue, 05 Mar 2024 14:22:10 +0000``), and
Unix time in seconds or milliseconds.  ``03/08/2024`` could be the 3rd of August or the 8th of March; such a date is
an error asking for the file's own form (``--date-format %m/%d/%Y``) rather than a guess, unless one of its numbers
exceeds 12.  The time of day is dropped: a record's date is a calendar day (docs/data-format.md).
"""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime

#: Unix times read as dates: seconds from 2001-09-09 (the first ten-digit second) and the same instants in milliseconds.
#: Smaller numbers are more likely years or counts than instants.
EPOCH_SECONDS = (10**9, 10**10)
EPOCH_MILLISECONDS = (10**12, 10**13)
#: How far past now a Unix time may be: a day, for clocks and zones; an incident that has not happened is misread.
FUTURE_SLACK_SECONDS = 86_400

_ISO = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?(?:[T ][\d:.]+(?:\s*(?:Z|UTC|GMT|[+-]\d{2}:?\d{2}))?)?$",
                  re.IGNORECASE)
_YEAR_FIRST = re.compile(r"^(\d{4})\s*[./]\s*(\d{1,2})\s*[./]\s*(\d{1,2})\.?(?:[T ]+\S.*)?$")  # 2024. 3. 5. 오후 2:22
_KOREAN = re.compile(r"^(\d{4})\s*[년年](?:\s*(\d{1,2})\s*[월月](?:\s*(\d{1,2})\s*[일日])?)?")
_NUMERIC = re.compile(r"^(\d{1,2})[./-](\d{1,2})[./-](\d{2}|\d{4})(?:[T ,]+.*)?$")
_MONTHS = {name: number for number, names in enumerate(
    [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")], 1) for name in names}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY_MONTH_YEAR = re.compile(rf"^(?:[a-z]{{3,9}},?\s+)?(\d{{1,2}})[\s/-]+{_MONTH}[\s/,-]+(\d{{4}}|\d{{2}})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"^(?:[a-z]{{3,9}},?\s+)?{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)


def parse_date(value: object, date_format: str | None = None) -> str:
    """``value`` as ``YYYY-MM-DD`` (or ``YYYY-MM`` / ``YYYY`` when that is all it says); ``date_format`` (``strptime``)
    is the file's own form, tried first.  Raises ``ValueError`` saying why a value cannot be read."""
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= EPOCH_SECONDS[0]:
        return _from_epoch(value)
    text = " ".join(str(value).split())
    if date_format:
        try:
            return datetime.strptime(text, date_format).date().isoformat()
        except ValueError:
            if not _NUMERIC.match(text):  # a value of a form that says which part is which (an ISO date) still reads
                with contextlib.suppress(ValueError):
                    return _read(text)
            raise ValueError(f"date {text!r} does not have the form {date_format!r} (--date-format)") from None
    return _read(text)


def _read(text: str) -> str:
    if re.fullmatch(r"\d{10}(?:\.\d+)?|\d{13}", text):
        return _from_epoch(float(text))
    if match := _ISO.match(text):
        year, month, day = match.groups()
        return _checked(year, month, day, text)
    if (match := _YEAR_FIRST.match(text)) or (match := _KOREAN.match(text)):
        year, month, day = match.groups()
        return _checked(year, month and f"{int(month):02d}", day and f"{int(day):02d}", text)
    if match := _DAY_MONTH_YEAR.match(text):
        day, month, year = match.groups()
        return _checked(_full_year(year), f"{_MONTHS[month.lower()]:02d}", f"{int(day):02d}", text)
    if match := _MONTH_DAY_YEAR.match(text):
        month, day, year = match.groups()
        return _checked(year, f"{_MONTHS[month.lower()]:02d}", f"{int(day):02d}", text)
    if match := _NUMERIC.match(text):
        if len(match.group(3)) == 2:  # 24.03.05: year first (as Korean and Japanese write it) or last
            raise ValueError(f"date {text!r} has a two-digit year and could be read several ways; give the file's "
                             "form with --date-format (e.g. %y.%m.%d or %d.%m.%y)")
        first, second, year = (int(part) for part in match.groups())
        if first == second or first > 12 >= second:  # 12/12: the same day either way
            return _checked(str(year), f"{second:02d}", f"{first:02d}", text)
        if second > 12 >= first:
            return _checked(str(year), f"{first:02d}", f"{second:02d}", text)
        raise ValueError(f"date {text!r} could be day/month or month/day; give the file's form with --date-format "
                         "(e.g. %m/%d/%Y or %d/%m/%Y)")
    try:
        return parsedate_to_datetime(text).date().isoformat()
    except (TypeError, ValueError, IndexError):
        pass
    raise ValueError(f"date {text!r} is not a date this import reads (YYYY-MM-DD, YYYY-MM, YYYY, a month by name, "
                     "or Unix time); give the file's form with --date-format")


def _from_epoch(number: float) -> str:
    """The UTC day of a Unix time (an export that writes numbers does not say its zone)."""
    seconds = number / 1000 if EPOCH_MILLISECONDS[0] <= number < EPOCH_MILLISECONDS[1] else number
    if not EPOCH_SECONDS[0] <= seconds <= datetime.now(tz=UTC).timestamp() + FUTURE_SLACK_SECONDS:
        raise ValueError(f"date {number!r} is a number but not a past Unix time in seconds or milliseconds")
    return datetime.fromtimestamp(seconds, tz=UTC).date().isoformat()


def _full_year(year: str) -> str:
    """A two-digit year (Jira's ``dd/MMM/yy``) in the century that does not put it in the future."""
    if len(year) == 4:
        return year
    this_year = date.today().year
    full = this_year - this_year % 100 + int(year)
    return str(full if full <= this_year else full - 100)


def _checked(year: str, month: str | None, day: str | None, text: str) -> str:
    """``YYYY[-MM[-DD]]``, once the calendar has such a day (``text``: the value as written, for the message)."""
    parts = [part for part in (year, month, day) if part]
    try:
        date(int(year), int(month or 1), int(day or 1))
    except ValueError as exc:
        raise ValueError(f"date {text!r} is not a day of the calendar ({exc})") from None
    return "-".join(parts)
