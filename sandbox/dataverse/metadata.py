"""``EntityDefinitions``: the metadata a client reads to learn the CRM's vocabulary and keys.

Enough of Dataverse's metadata API for a product-side doctor and vocabulary loader:
tables, their attributes, alternate keys, and option sets (``salesstage``'s labels are
the pipeline stages; ``statecode``/``statuscode`` pairs per table). The copilot's key column
and its alternate key show only while the organisation has them (:mod:`sandbox.dataverse.org`),
and an administrator creates them with ``POST .../Attributes`` and ``POST .../Keys`` (:func:`create`).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from sandbox.dataverse.errors import DataverseError, bad_request
from sandbox.dataverse.ids import NAMESPACE
from sandbox.dataverse.org import KEY_COLUMN_MAX_LENGTH, OrgConfig
from sandbox.dataverse.schema import STATES, Column, Entity, sales_stages
from sandbox.directory import User

_ATTRIBUTE_TYPES = {
    "uniqueidentifier": "Uniqueidentifier",
    "string": "String",
    "memo": "Memo",
    "money": "Money",
    "integer": "Integer",
    "bigint": "BigInt",
    "datetime": "DateTime",
    "dateonly": "DateTime",
    "picklist": "Picklist",
    "state": "State",
    "status": "Status",
    "lookup": "Lookup",
}
_METADATA_TYPES = {
    "picklist": "PicklistAttributeMetadata",
    "state": "StateAttributeMetadata",
    "status": "StatusAttributeMetadata",
    "lookup": "LookupAttributeMetadata",
    "string": "StringAttributeMetadata",
    "memo": "MemoAttributeMetadata",
    "money": "MoneyAttributeMetadata",
    "integer": "IntegerAttributeMetadata",
    "bigint": "BigIntAttributeMetadata",
    "datetime": "DateTimeAttributeMetadata",
    "dateonly": "DateTimeAttributeMetadata",
    "uniqueidentifier": "AttributeMetadata",
}
_SEGMENT = re.compile(r"^(?P<name>[A-Za-z]+)(?:\((?:LogicalName=)?'(?P<key>[^']*)'\))?$")


def _metadata_id(*parts: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "metadata:" + ":".join(parts)))


def _label(text: str) -> dict[str, Any]:
    label = {"Label": text, "LanguageCode": 1033}
    return {"LocalizedLabels": [label], "UserLocalizedLabel": label}


def entity_definition(entity: Entity) -> dict[str, Any]:
    """One table's ``EntityMetadata`` (the properties clients commonly select)."""
    return {
        "MetadataId": _metadata_id(entity.logical_name),
        "LogicalName": entity.logical_name,
        "SchemaName": entity.logical_name.capitalize(),
        "EntitySetName": entity.set_name,
        "PrimaryIdAttribute": entity.primary_id,
        "PrimaryNameAttribute": entity.primary_name,
        "ObjectTypeCode": entity.object_type_code,
        "IsActivity": entity.activity,
        "IsOptimisticConcurrencyEnabled": True,
        "DisplayName": _label(entity.description),
    }


def _options(entity: Entity, column: Column) -> list[dict[str, Any]]:
    if column.name == "salesstage":
        return [{"Value": v, "Label": _label(t)} for v, t in sales_stages().items()]
    states = STATES[entity.logical_name]
    if column.type == "state":
        return [
            {"Value": s, "Label": _label(label), "DefaultStatus": next(iter(reasons), None)}
            for s, (label, reasons) in states.items()
        ]
    return [
        {"Value": code, "Label": _label(text), "State": s}
        for s, (_, reasons) in states.items()
        for code, text in reasons.items()
    ]


_SYSTEM_COLUMNS = frozenset({"createdon", "modifiedon", "modifiedby", "ownerid", "statecode", "statuscode"})
"""Columns Dataverse maintains itself (``IsValidForUpdate`` false)."""


def attribute_definition(entity: Entity, column: Column, *, with_options: bool = False) -> dict[str, Any]:
    """One column's ``AttributeMetadata`` (option set included when asked and it has one)."""
    body: dict[str, Any] = {
        "@odata.type": f"#Microsoft.Dynamics.CRM.{_METADATA_TYPES[column.type]}",
        "MetadataId": _metadata_id(entity.logical_name, column.name),
        "LogicalName": column.name,
        "SchemaName": column.name,
        "EntityLogicalName": entity.logical_name,
        "AttributeType": _ATTRIBUTE_TYPES[column.type],
        "IsSecured": column.secured,
        "IsPrimaryId": column.name == entity.primary_id,
        "IsPrimaryName": column.name == entity.primary_name,
        "DisplayName": _label(column.description),
        # What a PATCH may change: the editable columns of a writable table, not system ones.
        "IsValidForUpdate": entity.writable
        and column.type != "uniqueidentifier"
        and column.name not in _SYSTEM_COLUMNS,
    }
    if column.max_length is not None:
        body["MaxLength"] = column.max_length
    if column.type == "dateonly":
        body["Format"] = "DateOnly"
    if column.type == "lookup":
        body["Targets"] = list(column.targets)
    if with_options and column.type in ("picklist", "state", "status"):
        body["OptionSet"] = {
            "MetadataId": _metadata_id(entity.logical_name, column.name, "optionset"),
            "Name": f"{entity.logical_name}_{column.name}",
            "IsGlobal": False,
            "OptionSetType": {"picklist": "Picklist", "state": "State", "status": "Status"}[column.type],
            "Options": _options(entity, column),
        }
    return body


def columns_of(entity: Entity, org: OrgConfig) -> tuple[Column, ...]:
    """The table's columns as the organisation has them now: the key column only once created
    (on ``opportunity`` too, where the schema has no key of its own)."""
    key = org.key_column
    columns = tuple(c for c in entity.columns if c.name != key or org.has_column(entity.logical_name))
    if entity.logical_name == "opportunity" and org.has_column("opportunity"):
        columns += (
            Column(key, "string", "Copilot key of the last update", max_length=KEY_COLUMN_MAX_LENGTH),
        )
    return columns


def key_definitions(entity: Entity, org: OrgConfig) -> list[dict[str, Any]]:
    """The table's alternate keys (``EntityKeyMetadata``), once created."""
    if entity.alternate_key is None or not org.has_key(entity.logical_name):
        return []
    return [
        {
            "MetadataId": _metadata_id(entity.logical_name, "key", entity.alternate_key),
            "LogicalName": f"{entity.alternate_key}_key",
            "SchemaName": f"{entity.alternate_key}_key",
            "EntityLogicalName": entity.logical_name,
            "KeyAttributes": [entity.alternate_key],
            "EntityKeyIndexStatus": "Active",
            "DisplayName": _label("Copilot idempotency key"),
        }
    ]


def _select(body: dict[str, Any], select: str | None, expand: str | None = None) -> dict[str, Any]:
    if not select:
        return body
    # Expanded navigation properties come back whatever $select says, as on Dataverse.
    expanded = {e.split("(", 1)[0].strip() for e in (expand or "").split(",")}
    wanted = {s.strip() for s in select.split(",")} | expanded
    return {k: v for k, v in body.items() if k in wanted or k in ("MetadataId", "@odata.type")}


def _parse(segments: list[str]) -> list[tuple[str, str | None]]:
    parsed: list[tuple[str, str | None]] = []
    for segment in segments:
        match = _SEGMENT.match(segment) if not segment.startswith("Microsoft.Dynamics.CRM.") else None
        parsed.append((match.group("name"), match.group("key")) if match else (segment, None))
    return parsed


def create(
    tables: dict[str, Entity], org: OrgConfig, caller: User, segments: list[str], body: dict[str, Any]
) -> str:
    """``POST EntityDefinitions(LogicalName='<t>')/Attributes`` or ``.../Keys``: the new
    metadata's path (for ``OData-EntityId``). Only the copilot's key column and its key."""
    parsed = _parse(segments)
    if len(parsed) != 2 or parsed[0][0] != "EntityDefinitions" or parsed[0][1] is None or parsed[1][1]:
        raise bad_request("POST EntityDefinitions(LogicalName='<table>')/Attributes or .../Keys.")
    table = parsed[0][1]
    if table not in tables:
        raise DataverseError(404, "0x80040217", f"Could not find an entity with the name {table}.")
    child = parsed[1][0]
    if child == "Attributes":
        return f"EntityDefinitions({_metadata_id(table)})/Attributes({org.add_column(caller, table, body)})"
    if child == "Keys":
        return f"EntityDefinitions({_metadata_id(table)})/Keys({org.add_key(caller, table, body)})"
    raise bad_request(f"Resource not found for the segment '{segments[1]}'.")


def resolve(
    tables: dict[str, Entity], org: OrgConfig, segments: list[str], params: dict[str, str]
) -> dict[str, Any]:
    """Answer ``EntityDefinitions...`` (``segments`` = the path split on ``/``)."""
    parsed = _parse(segments)
    name, key = parsed[0]
    if name != "EntityDefinitions":
        raise bad_request(f"Resource not found for the segment '{segments[0]}'.")
    if key is None:
        if len(parsed) > 1:
            raise bad_request("Name a table: EntityDefinitions(LogicalName='<name>').")
        return {"value": [_select(entity_definition(t), params.get("$select")) for t in tables.values()]}
    entity = tables.get(key)
    if entity is None:
        raise DataverseError(404, "0x80040217", f"Could not find an entity with the name {key}.")
    if len(parsed) == 1:
        return _select(entity_definition(entity), params.get("$select"))
    child, child_key = parsed[1]
    if child == "Keys" and len(parsed) == 2:
        return {"value": key_definitions(entity, org)}
    if child != "Attributes":
        raise bad_request(f"Resource not found for the segment '{segments[1]}'.")
    with_options = "OptionSet" in params.get("$expand", "")
    if child_key is None:
        return {
            "value": [
                _select(attribute_definition(entity, c), params.get("$select"))
                for c in columns_of(entity, org)
            ]
        }
    column = next((c for c in columns_of(entity, org) if child_key in (c.name, c.row_key)), None)
    if column is None:
        raise DataverseError(
            404,
            "0x80040217",
            f"Could not find an attribute with the name {child_key} on {entity.logical_name}.",
        )
    body = attribute_definition(entity, column, with_options=with_options)
    if len(parsed) == 3:
        cast = parsed[2][0].removeprefix("Microsoft.Dynamics.CRM.")
        if cast != _METADATA_TYPES[column.type]:
            raise bad_request(f"The attribute {column.name} is not a {cast}.")
    elif len(parsed) > 3:
        raise bad_request("Unsupported metadata path.")
    return _select(body, params.get("$select"), params.get("$expand"))
