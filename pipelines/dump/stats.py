"""Counters of one read, for Beam metrics and the run report."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ReadStats:
    """What a reader saw; pass one to ``iter_pages(stats=...)`` and read it afterwards."""

    pages: int = 0  # RawPage records yielded
    redirects: int = 0  # of which redirects
    older_revisions: int = 0  # revisions before the last one of a page (history dumps), not used
    ns_from_title: int = 0  # pages without <ns>: namespace taken from the title prefix
    ns_defaulted: int = 0  # pages without <ns> and no siteinfo to resolve it: ns = 0
    raw_bytes: int = 0  # compressed bytes read
    xml_bytes: int = 0  # decompressed UTF-8 XML bytes scanned
    dead_letters: dict[str, int] = field(default_factory=dict)  # reason -> count

    def count_dead_letter(self, reason: str) -> None:
        """Add one dead letter with ``reason`` to the tally."""
        self.dead_letters[reason] = self.dead_letters.get(reason, 0) + 1

    def as_dict(self) -> dict[str, int]:
        """Flat counters, dead letters as ``dead_letters.<reason>``."""
        flat = {name: getattr(self, name) for name in
                ("pages", "redirects", "older_revisions", "ns_from_title", "ns_defaulted",
                 "raw_bytes", "xml_bytes")}
        flat.update({f"dead_letters.{reason}": count for reason, count in sorted(self.dead_letters.items())})
        return flat
