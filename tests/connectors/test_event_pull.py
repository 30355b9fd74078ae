"""connectors/event_pull.py: the date each event sink layout gives a key, and the window a period asks for."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from connectors.event_pull import date_of, window
from connectors.pull_common import PullError

H, D = timedelta(hours=1), timedelta(days=1)


@pytest.mark.parametrize(("key", "expected"), [
    # Firehose's default prefix: the hour folder
    ("firehose/2026/11/01/02/spot-events-1-2026-11-01-02-15-00-4e1c.gz", (datetime(2026, 11, 1, 2), H)),
    # CloudTrail: the day folder, and the delivery minute in the file name
    ("AWSLogs/444455557777/CloudTrail/us-east-1/2026/11/01/444455557777_CloudTrail_us-east-1_20261101T0215Z_Xy12.json.gz",
     (datetime(2026, 11, 1, 2, 15), timedelta(minutes=1))),
    ("AWSLogs/444455557777/CloudTrail/us-east-1/2026/11/01/renamed.json.gz", (datetime(2026, 11, 1), D)),
    # the Activity Log: y=/m=/d=/h= (the m=00 after it is the minute)
    ("resourceId=/SUBSCRIPTIONS/S/y=2026/m=11/d=02/h=05/m=00/PT1H.json", (datetime(2026, 11, 2, 5), H)),
    # a log sink: the day folder and the hour in the file name
    ("cloudaudit.googleapis.com/system_event/2026/11/03/08:00:00_08:59:59_S0.json", (datetime(2026, 11, 3, 8), H)),
    ("cloudaudit.googleapis.com/system_event/2026/11/03/late-shard.json", (datetime(2026, 11, 3), D)),
    # custom Firehose prefixes
    ("events/year=2026/month=11/day=4/hour=23/x.gz", (datetime(2026, 11, 4, 23), H)),
    ("events/dt=2026-11-05/x.gz", (datetime(2026, 11, 5), D)),
    # the deepest date folder wins
    ("archive/2025/01/01/copy/2026/11/06/x.gz", (datetime(2026, 11, 6), D)),
    # undated: a CloudWatch Logs export, a bad date
    ("exports/3f1a2b-export/spot-events-stream/000000.gz", None),
    ("firehose/2026/13/01/02/x.gz", None),
])
def test_date_of_each_layout(key: str, expected: tuple[datetime, timedelta] | None) -> None:
    assert date_of(key) == expected


def test_a_period_covers_its_hours_and_the_lag_either_side() -> None:
    nov = window(["2026-11"])
    assert nov.words == "2026-11"
    assert nov.covers(datetime(2026, 11, 30, 23), H, timedelta(0))
    assert not nov.covers(datetime(2026, 12, 1, 0), H, timedelta(0))
    assert nov.covers(datetime(2026, 12, 1, 0), H, H)  # the first hour of December, with an hour of lag
    assert not nov.covers(datetime(2026, 12, 1, 1), H, H)
    assert nov.covers(datetime(2026, 10, 31, 23), H, H) and not nov.covers(datetime(2026, 10, 31, 22), H, H)
    assert nov.covers(datetime(2026, 10, 31), D, H)  # a day folder reaches to midnight
    since = window(since="2026-11-15")
    assert since.covers(datetime(2030, 1, 1), D, H) and not since.covers(datetime(2026, 11, 14), D, timedelta(0))
    assert window().covers(datetime(1999, 1, 1), D, timedelta(0))  # no window: everything


@pytest.mark.parametrize(("periods", "since", "message"), [
    (["2026-13"], None, "--period '2026-13': expected YYYY-MM, e.g. 2026-10"),
    ([], "2026-02-30", "--since '2026-02-30': expected YYYY-MM-DD, e.g. 2026-10-01"),
    (["2026-11"], "2026-11-01", "give --period or --since, not both"),
])
def test_bad_windows_are_named(periods: list[str], since: str | None, message: str) -> None:
    with pytest.raises(PullError) as e:
        window(periods, since)
    assert str(e.value) == message
