"""When Luigi's is open, and the words a caller hears for a date and a time.

Two services a day, lunch 12:00-14:30 and dinner 18:00-22:30, closed on Mondays. A table
is booked for :data:`SITTING` and the last one starts :data:`LAST_SEATING_BEFORE_CLOSE`
before the service ends, so a booking never runs into the next service's cleaning.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

CLOSED_WEEKDAYS = frozenset({0})  # Monday
SITTING = dt.timedelta(hours=2)
LAST_SEATING_BEFORE_CLOSE = dt.timedelta(minutes=30)


@dataclass(frozen=True)
class Service:
    name: str
    opens: dt.time
    closes: dt.time

    @property
    def last_seating(self) -> dt.time:
        closes = dt.datetime.combine(dt.date.min, self.closes)
        return (closes - LAST_SEATING_BEFORE_CLOSE).time()

    def seats(self, at: dt.time) -> bool:
        return self.opens <= at <= self.last_seating


SERVICES = (
    Service("lunch", dt.time(12, 0), dt.time(14, 30)),
    Service("dinner", dt.time(18, 0), dt.time(22, 30)),
)


def is_open(day: dt.date) -> bool:
    return day.weekday() not in CLOSED_WEEKDAYS


def service_at(day: dt.date, at: dt.time) -> Service | None:
    """The service a table booked for ``at`` on ``day`` would sit in; None if there is none."""
    if not is_open(day):
        return None
    return next((s for s in SERVICES if s.seats(at)), None)


def spoken_time(at: dt.time) -> str:
    """19:30 -> "7:30 pm", 12:00 -> "noon": how a host says it (and the TTS reads it)."""
    if at == dt.time(12, 0):
        return "noon"
    hour = at.hour % 12 or 12
    suffix = "am" if at.hour < 12 else "pm"
    return f"{hour} {suffix}" if at.minute == 0 else f"{hour}:{at.minute:02d} {suffix}"


def spoken_date(day: dt.date, today: dt.date) -> str:
    """ "today", "tomorrow", or "Friday the 14th of March"."""
    if day == today:
        return "today"
    if day == today + dt.timedelta(days=1):
        return "tomorrow"
    n = day.day
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{day:%A} the {n}{suffix} of {day:%B}"


def week_summary() -> str:
    """The opening hours of the whole week, in one sentence."""
    services = " and ".join(
        f"{s.name} from {spoken_time(s.opens)} to {spoken_time(s.closes)}" for s in SERVICES
    )
    return f"Tuesday to Sunday, {services}; closed on Mondays."


def day_summary(day: dt.date, today: dt.date) -> str:
    when = spoken_date(day, today)
    name = f"{day:%A}"
    if not is_open(day):
        return f"We are closed on {name}s." if when != "today" else "We are closed today."
    services = " and ".join(
        f"{s.name} from {spoken_time(s.opens)} to {spoken_time(s.closes)}" for s in SERVICES
    )
    subject = f"On {name}" if when not in ("today", "tomorrow") else when.capitalize()
    return f"{subject} we are open for {services}."
