"""An activity entity that keeps all its properties on the wire.

botbuilder's ``Entity`` serialises only ``type``: every other property of a Teams entity
(``streaminfo``'s ``streamId``, the AI message entity's ``citation`` ...) would be dropped.
"""

from __future__ import annotations

from typing import Any, ClassVar

from botbuilder.schema import Entity


class JsonEntity(Entity):
    """An entity sent exactly as ``data`` (which must have a ``type``)."""

    _attribute_map: ClassVar[dict[str, dict[str, str]]] = {
        "type": {"key": "type", "type": "str"},
        "additional_properties": {"key": "", "type": "{object}"},
    }

    def __init__(self, data: dict[str, Any]):
        super().__init__(type=str(data["type"]))
        self.additional_properties = {k: v for k, v in data.items() if k != "type"}
