"""``EntityDefinitions``: the metadata a client reads to learn the CRM's vocabulary and keys.

Enough of Dataverse's metadata API for a product-side doctor and vocabulary loader:
tables, their attributes, alternate keys, and option sets (``salesstage``'s labels are
the pipeline stages; ``statecode``/``statuscode`` pairs per table).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from sandbox.dataverse.errors import DataverseError, bad_request
from sandbox.dataverse.ids import NAMESPACE
from sandbox.dataverse.schema import STATES, Column, Entity, sales_stages

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


def key_definitions(entity: Entity) -> list[dict[str, Any]]:
    """The table's alternate keys (``EntityKeyMetadata``)."""
    if entity.alternate_key is None:
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


def resolve(tables: dict[str, Entity], segments: list[str], params: dict[str, str]) -> dict[str, Any]:
    """Answer ``EntityDefinitions...`` (``segments`` = the path split on ``/``)."""
    parsed = []
    for segment in segments:
        match = _SEGMENT.match(segment) if not segment.startswith("Microsoft.Dynamics.CRM.") else None
        parsed.append((match.group("name"), match.group("key")) if match else (segment, None))
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
        return {"value": key_definitions(entity)}
    if child != "Attributes":
        raise bad_request(f"Resource not found for the segment '{segments[1]}'.")
    with_options = "OptionSet" in params.get("$expand", "")
    if child_key is None:
        return {
            "value": [_select(attribute_definition(entity, c), params.get("$select")) for c in entity.columns]
        }
    column = entity.column(child_key)
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
