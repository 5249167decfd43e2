"""Which meeting attendees are CRM contacts the rep may see.

Matched by email address against the contacts of the accounts the CRM shows the rep
(the connector's ``accounts``, then ``contacts`` per account, all under the rep's token): a
contact of an account the rep may not see is never listed, so it is never matched. The
addresses are compared here, in code, and go nowhere else; a CRM with a contact lookup by
address would replace the listing with one call per attendee.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from copilot.briefs.types import Attendee, Meeting
from copilot.evidence import Evidence
from copilot.tools.crm_client import CrmCallError


def domain_of(address: str) -> str:
    """The lower-cased domain of an email address ("" if it has none)."""
    return address.rpartition("@")[2].strip().lower()


def external_attendees(meeting: Meeting, own_domain: str) -> list[Attendee]:
    """Attendees (and an outside organiser) not of the rep's own email domain, once each."""
    seen: set[str] = set()
    people = [*meeting.attendees, *([meeting.organizer] if meeting.organizer else [])]
    external: list[Attendee] = []
    for person in people:
        key = person.address.strip().lower()
        if key in seen or not key or domain_of(key) == own_domain:
            continue
        seen.add(key)
        external.append(person)
    return external


async def visible_contacts(evidence: Evidence, addresses: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The CRM contacts the rep may see whose address is one of ``addresses`` (lower-cased key)."""
    wanted = {a.strip().lower() for a in addresses if a.strip()}
    found: dict[str, dict[str, Any]] = {}
    if not wanted:
        return found
    for account in await evidence.accounts():
        if not isinstance(account.get("id"), str):
            continue
        try:
            for contact in await evidence.contacts(account["id"]):
                address = str(contact.get("email") or "").strip().lower()
                if address in wanted and address not in found:
                    found[address] = contact
        except CrmCallError:
            continue  # an account the CRM stopped showing between the two calls: not matched
        if len(found) == len(wanted):
            break
    return found
