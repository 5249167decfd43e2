// Validate Adaptive Card JSON with the official `adaptivecards` JS library (3.x).
//
// stdin: one card (a JSON object) or a batch of cards (a JSON array of objects).
// stdout: for one card `{"errors": [...], "warnings": [...]}`; for a batch, an array
// of those, in input order. Each entry is `{"event": <ValidationEvent name>, "phase":
// <ValidationPhase name>, "message": ...}`.
//
// The card is parsed for the schema version Teams mobile renders (1.5) with a
// SerializationContext that records every parse event (unknown element or action
// types, invalid property values, properties newer than 1.5...), then checked with
// `validateProperties()` (duplicate or missing input ids, required inputs without a
// label or an error message, empty collections...).
//
// The package's `lib/` build is extension-less ESM that Node cannot load, so this
// loads the UMD bundle in `dist/` through `createRequire`.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const AC = require("adaptivecards/dist/adaptivecards.js");

// Events that do not make a card unusable; everything else is an error.
const WARNING_EVENTS = new Set([
    AC.ValidationEvent.Hint,
    AC.ValidationEvent.Deprecated,
    AC.ValidationEvent.UnknownElementType,
    AC.ValidationEvent.UnknownActionType,
]);

function describe(event) {
    return {
        event: AC.ValidationEvent[event.event],
        phase: AC.ValidationPhase[event.phase],
        message: event.message,
    };
}

function validate(json) {
    const errors = [];
    const warnings = [];
    const sort = (event) => (WARNING_EVENTS.has(event.event) ? warnings : errors).push(describe(event));

    if (json === null || typeof json !== "object" || Array.isArray(json)) {
        return { errors: [{ event: "Other", phase: "Parse", message: "a card must be a JSON object" }], warnings };
    }
    if (json.type !== "AdaptiveCard") {
        errors.push({ event: "MissingCardType", phase: "Parse", message: 'type must be "AdaptiveCard"' });
    }
    const context = new AC.SerializationContext(AC.Versions.v1_5);
    const version = AC.Version.parse(json.version, context);
    if (!version || !version.isValid || version.compareTo(AC.Versions.v1_5) > 0) {
        errors.push({
            event: "UnsupportedCardVersion",
            phase: "Parse",
            message: `version ${JSON.stringify(json.version)} is not a version Teams mobile renders (at most 1.5)`,
        });
    }
    const card = new AC.AdaptiveCard();
    card.parse(json, context);
    for (let i = 0; i < context.eventCount; i++) {
        sort(context.getEventAt(i));
    }
    for (const event of card.validateProperties().validationEvents) {
        sort(event);
    }
    return { errors, warnings };
}

const input = JSON.parse(readFileSync(0, "utf8"));
const output = Array.isArray(input) ? input.map(validate) : validate(input);
process.stdout.write(JSON.stringify(output));
