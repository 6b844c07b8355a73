// Turns a JSON Schema, as pydantic writes it, into a GBNF grammar for llama.cpp's sampler, and says which
// constraints it could not put in. Pure: no engine needed, so the unit tests run it without the model.
//
// Why not node-llama-cpp's own JSON-schema grammar: it ignores `pattern` and does not know `anyOf` (a schema
// it does not recognise becomes a grammar for `null`), and with the money patterns gone a 1.5B model writes
// "This is a placeholder value" into amount fields. llama.cpp's server enforces patterns; so does this.
//
// What the grammar holds:
// - $ref into $defs (and a one-item allOf) is inlined, with the referring schema's own keys on top; a recursive
//   $ref is refused, since inlining it would not end;
// - anyOf and oneOf are alternatives; a list of types is one alternative per type, each with its constraints;
//   `{}` / `true` is any JSON value;
// - objects: every property, in the order of `properties` as sent, required ones first, as llama.cpp's own
//   converter orders them (the worker's schema text has sorted keys, so that is alphabetical). Declaration
//   order was tried and is worse for this model: with `supplier` first it wrote `"supplier": null` for each
//   of three invoices, and filled it when it came after the amounts. An optional property is always
//   generated (listed as dropped). Extra keys are never generated when there are properties (a narrower
//   language: every output still satisfies the schema); without properties, additionalProperties gives the
//   values' schema;
// - arrays: items with minItems/maxItems; prefixItems as a tuple;
// - strings: minLength/maxLength, format "date", and `pattern` for a regular-expression subset (literals, `.`,
//   classes, \d \w \s, groups, alternation, ? * + {n} {n,} {n,m}); an unanchored pattern may have any text
//   around it. A pattern outside the subset (lookaround, backreferences) is dropped and listed;
// - integers: a range with both bounds (minimum/exclusiveMinimum from 0 up, maximum/exclusiveMaximum) as
//   the exact set of decimal numbers; a lower bound of 0 or 1 alone as no sign (and no leading zero); numbers
//   as JSON numbers; other bounds are listed;
// - const and enum as literals.
// Whitespace between tokens is at most one space and never a newline: the same JSON in fewer tokens.
// Annotations (title, description, default, examples) carry no constraint and are left out silently.

import {resolve} from "node:path";
import {pathToFileURL} from "node:url";

export class SchemaError extends Error {}

const ANNOTATIONS = new Set([
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "definitions",
    "readOnly",
    "writeOnly",
    "deprecated"
]);
const TYPES = new Set(["string", "number", "integer", "boolean", "null", "object", "array"]);

// The JSON building blocks every grammar carries. `char` is one character of a JSON string's content.
const BASE_RULES = [
    ["space", '" "?'],
    ["char", '[^"\\\\\\x00-\\x1F\\x7F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})'],
    ["string", '"\\"" char* "\\""'],
    ["integer", '"-"? ("0" | [1-9] [0-9]{0,15})'],
    ["number", 'integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?'],
    ["boolean", '"true" | "false"'],
    ["null", '"null"'],
    ["value", "object | array | string | number | boolean | null"],
    ["object", '"{" space (string space ":" space value space ("," space string space ":" space value space)*)? "}"'],
    ["array", '"[" space (value space ("," space value space)*)? "]"'],
    ["date", '"\\"" [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) "\\""']
];

/** A GBNF string literal for `text`. */
export function literal(text) {
    let out = "";
    for (const c of text) {
        const code = c.codePointAt(0);
        if (c === '"' || c === "\\")
            out += `\\${c}`;
        else if (code < 0x20 || code === 0x7f)
            out += `\\x${code.toString(16).padStart(2, "0")}`;
        else
            out += c;
    }
    return `"${out}"`;
}

/**
 * @param {unknown} schema a JSON Schema (draft 2020-12 as pydantic emits it), or null for any JSON object
 * @returns {{grammar: string, dropped: {path: string, keyword: string}[]}}
 */
export function toGrammar(schema) {
    const generator = new Generator(schema);
    const root = schema == null ? "object" : generator.rule(schema, "$", []);
    return {grammar: generator.render(root), dropped: generator.dropped};
}

class Generator {
    constructor(schema) {
        if (schema != null && (typeof schema !== "object" || Array.isArray(schema)))
            throw new SchemaError("the schema must be a JSON object");
        this.defs = {...(schema?.definitions ?? {}), ...(schema?.$defs ?? {})};
        this.dropped = [];
        this.rules = new Map(); // name -> body, in the order they were made
        this.byBody = new Map(); // body -> name, so equal sub-schemas share a rule
    }

    drop(path, keyword) {
        this.dropped.push({path, keyword});
    }

    render(root) {
        const lines = [`root ::= ${root} "\\n\\n\\n\\n" [\\n]*`];
        for (const [name, body] of BASE_RULES)
            lines.push(`${name} ::= ${body}`);
        for (const [name, body] of this.rules)
            lines.push(`${name} ::= ${body}`);
        return lines.join("\n") + "\n";
    }

    // A rule for this body: a name, shared with any other schema that came out the same.
    named(path, body) {
        const existing = this.byBody.get(body);
        if (existing)
            return existing;
        const base = `s-${path.replace(/^\$\.?/, "").replace(/[^a-zA-Z0-9]+/g, "-").replace(/^-|-$/g, "") || "root"}`.toLowerCase();
        let name = base;
        for (let i = 2; this.rules.has(name); i++)
            name = `${base}-${i}`;
        this.rules.set(name, body);
        this.byBody.set(body, name);
        return name;
    }

    resolveRef(ref, path) {
        for (const prefix of ["#/$defs/", "#/definitions/"]) {
            if (typeof ref === "string" && ref.startsWith(prefix)) {
                const name = decodeURIComponent(ref.slice(prefix.length)).replaceAll("~1", "/").replaceAll("~0", "~");
                if (Object.hasOwn(this.defs, name))
                    return [name, this.defs[name]];
            }
        }
        throw new SchemaError(`${path}: $ref ${JSON.stringify(ref)} does not name a definition in $defs`);
    }

    // The grammar expression (a rule name or a literal) for `node` at `path`.
    rule(node, path, refStack) {
        if (node === true)
            return "value";
        if (node === false)
            throw new SchemaError(`${path}: the schema \`false\` admits no value`);
        if (node === null || typeof node !== "object" || Array.isArray(node))
            throw new SchemaError(`${path}: a schema must be an object or a boolean`);

        if ("$ref" in node) {
            const [name, target] = this.resolveRef(node.$ref, path);
            if (refStack.includes(name))
                throw new SchemaError(`${path}: $ref to ${name} is recursive; a grammar cannot inline it`);
            const {$ref: _, ...rest} = node;
            return this.rule({...target, ...rest}, path, [...refStack, name]);
        }
        if ("allOf" in node) {
            if (!Array.isArray(node.allOf) || node.allOf.length !== 1)
                throw new SchemaError(`${path}: allOf with more than one schema is not supported`);
            const {allOf, ...rest} = node;
            return this.rule({...allOf[0], ...rest}, path, refStack);
        }
        const constraints = Object.keys(node).filter((key) => !ANNOTATIONS.has(key));
        const keep = (...keys) => {
            for (const key of constraints)
                if (!keys.includes(key))
                    this.drop(path, key);
        };

        for (const union of ["anyOf", "oneOf"]) {
            if (union in node) {
                if (!Array.isArray(node[union]) || node[union].length === 0)
                    throw new SchemaError(`${path}: ${union} needs a non-empty list`);
                keep(union); // beside a union, pydantic writes only annotations
                const branches = node[union].map((branch, i) => this.rule(branch, `${path}.${union}${i}`, refStack));
                return this.named(path, [...new Set(branches)].join(" | "));
            }
        }
        if ("const" in node) {
            keep("const", "type");
            return literal(JSON.stringify(node.const));
        }
        if ("enum" in node) {
            keep("enum", "type");
            if (!Array.isArray(node.enum) || node.enum.length === 0)
                throw new SchemaError(`${path}: enum needs a non-empty list`);
            return this.named(path, node.enum.map((item) => literal(JSON.stringify(item))).join(" | "));
        }

        let type = node.type;
        if (type === undefined) {
            if ("properties" in node || "additionalProperties" in node)
                type = "object";
            else if ("items" in node || "prefixItems" in node)
                type = "array";
            else {
                keep();
                return "value";
            }
        }
        if (Array.isArray(type)) {
            if (type.length === 0)
                throw new SchemaError(`${path}: an empty list of types admits no value`);
            if (type.length > 1) {
                const {type: _, ...rest} = node;
                const branches = type.map((single) => this.rule({...rest, type: single}, `${path}.${single}`, refStack));
                return this.named(path, branches.join(" | "));
            }
            type = type[0];
        }
        if (!TYPES.has(type))
            throw new SchemaError(`${path}: unknown type ${JSON.stringify(type)}`);
        switch (type) {
            case "object":
                keep("type", "properties", "required", "additionalProperties");
                return this.object(node, path, refStack);
            case "array":
                keep("type", "items", "prefixItems", "minItems", "maxItems");
                return this.array(node, path, refStack);
            case "string":
                return this.string(node, path, keep);
            case "integer":
                return this.integer(node, path, keep);
            default:
                keep("type");
                return type; // number, boolean, null: base rules
        }
    }

    object(node, path, refStack) {
        const properties = node.properties ?? {};
        const required = Array.isArray(node.required) ? node.required.filter((name) => Object.hasOwn(properties, name)) : [];
        const names = Object.keys(properties);
        const order = [...names.filter((name) => required.includes(name)), ...names.filter((name) => !required.includes(name))];
        if (order.length === 0) {
            const extra = node.additionalProperties;
            if (extra === undefined || extra === true)
                return "object";
            if (extra === false)
                return literal("{") + " space " + literal("}");
            const value = this.rule(extra, `${path}.*`, refStack);
            const pair = `string space ":" space ${value} space`;
            return this.named(path, `"{" space (${pair} ("," space ${pair})*)? "}"`);
        }
        const parts = order.map((name) => {
            if (!required.includes(name))
                this.drop(`${path}.${name}`, "optional");
            const value = this.rule(properties[name], `${path}.${name}`, refStack);
            return `${literal(JSON.stringify(name))} space ":" space ${value} space`;
        });
        return this.named(path, `"{" space ${parts.join(' "," space ')} "}"`);
    }

    array(node, path, refStack) {
        if (Array.isArray(node.prefixItems)) {
            if (node.items !== false && node.items !== undefined)
                this.drop(path, "items after prefixItems");
            const items = node.prefixItems.map((item, i) => this.rule(item, `${path}.${i}`, refStack));
            const body = items.length === 0 ? "" : `${items.map((item) => `${item} space`).join(' "," space ')} `;
            return this.named(path, `"[" space ${body}"]"`);
        }
        const item = node.items === undefined || node.items === true ? "value" : this.rule(node.items, `${path}.item`, refStack);
        const min = Number.isInteger(node.minItems) ? Math.max(0, node.minItems) : 0;
        const max = Number.isInteger(node.maxItems) ? node.maxItems : null;
        if (max !== null && max < min)
            throw new SchemaError(`${path}: maxItems is below minItems`);
        if (max === 0)
            return this.named(path, '"[" space "]"');
        const more = `("," space ${item} space)${repeat(Math.max(min - 1, 0), max === null ? null : max - 1)}`;
        const elements = `${item} space ${more}`;
        return this.named(path, `"[" space ${min === 0 ? `(${elements})?` : elements} "]"`);
    }

    string(node, path, keep) {
        if (node.format === "date" || (node.format === undefined && isDatePattern(node.pattern))) {
            keep("type", "format", ...(isDatePattern(node.pattern) ? ["pattern"] : []));
            return "date";
        }
        if (typeof node.pattern === "string") {
            try {
                const body = patternGrammar(node.pattern);
                keep("type", "pattern");
                return this.named(path, `"\\"" ${body} "\\""`);
            } catch (error) {
                if (!(error instanceof PatternError))
                    throw error;
                // The pattern is listed as dropped below; the string keeps its length limits.
            }
        }
        keep("type", "minLength", "maxLength");
        const min = Number.isInteger(node.minLength) ? Math.max(0, node.minLength) : 0;
        const max = Number.isInteger(node.maxLength) ? node.maxLength : null;
        if (min === 0 && max === null)
            return "string";
        if (max !== null && max < min)
            throw new SchemaError(`${path}: maxLength is below minLength`);
        return this.named(path, `"\\"" char${repeat(min, max)} "\\""`);
    }

    integer(node, path, keep) {
        // pydantic writes ge=1 as minimum 1 and gt=0 as exclusiveMinimum 0, le=1000 as maximum 1000.
        const [lowKey, low] = typeof node.minimum === "number" ? ["minimum", Math.ceil(node.minimum)]
            : typeof node.exclusiveMinimum === "number" ? ["exclusiveMinimum", Math.floor(node.exclusiveMinimum) + 1]
                : [null, null];
        const [highKey, high] = typeof node.maximum === "number" ? ["maximum", Math.floor(node.maximum)]
            : typeof node.exclusiveMaximum === "number" ? ["exclusiveMaximum", Math.ceil(node.exclusiveMaximum) - 1]
                : [null, null];
        if (low !== null && low >= 0 && high !== null && high < 1e15) {
            if (high < low)
                throw new SchemaError(`${path}: no integer lies between the bounds`);
            keep("type", lowKey, highKey);
            return this.named(path, integerRange(low, high));
        }
        if (low === 0 || low === 1) {
            keep("type", lowKey);
            return low === 0 ? this.named("non-negative", '"0" | [1-9] [0-9]{0,15}') : this.named("positive", "[1-9] [0-9]{0,15}");
        }
        keep("type");
        return "integer";
    }
}

/** GBNF alternatives for the decimal integers from `low` to `high` (0 <= low <= high), without leading zeros. */
export function integerRange(low, high) {
    const alternatives = [];
    for (let digits = String(low).length; digits <= String(high).length; digits++) {
        const from = Math.max(low, digits === 1 ? 0 : 10 ** (digits - 1));
        const to = Math.min(high, 10 ** digits - 1);
        if (from <= to)
            alternatives.push(...sameLength(String(from), String(to)));
    }
    return alternatives.join(" | ");
}

// Patterns for the numbers from `a` to `b`, two digit strings of one length, split where their digits differ.
function sameLength(a, b) {
    if (a === b)
        return [literal(a)];
    if (a.length === 1)
        return [`[${a}-${b}]`];
    if (a[0] === b[0])
        return sameLength(a.slice(1), b.slice(1)).map((rest) => `${literal(a[0])} (${rest})`);
    const tail = a.length - 1;
    const any = `[0-9]{${tail}}`;
    const out = [];
    let first = Number(a[0]);
    let last = Number(b[0]);
    if (!/^0+$/.test(a.slice(1))) {
        out.push(...sameLength(a.slice(1), "9".repeat(tail)).map((rest) => `${literal(a[0])} (${rest})`));
        first += 1;
    }
    const lastFull = /^9+$/.test(b.slice(1));
    if (!lastFull)
        last -= 1;
    if (first <= last)
        out.push(`${first === last ? literal(String(first)) : `[${first}-${last}]`} ${any}`);
    if (!lastFull)
        out.push(...sameLength("0".repeat(tail), b.slice(1)).map((rest) => `${literal(b[0])} (${rest})`));
    return out;
}

function repeat(min, max) {
    if (max === null)
        return min === 0 ? "*" : min === 1 ? "+" : `{${min},}`;
    if (min === 0 && max === 1)
        return "?";
    return min === max ? `{${min}}` : `{${min},${max}}`;
}

function isDatePattern(pattern) {
    return pattern === "^\\d{4}-\\d{2}-\\d{2}$" || pattern === "^[0-9]{4}-[0-9]{2}-[0-9]{2}$";
}

// ------------------------------------------------------------------------------------ regular expressions

export class PatternError extends Error {}

/**
 * The GBNF for the content of a JSON string that matches `pattern` (ECMA-262 syntax, the subset above).
 * The output is JSON text: a literal `"` or `\` in the pattern is written escaped, as the JSON string holds it.
 */
export function patternGrammar(pattern) {
    const parser = new PatternParser(pattern);
    const anchoredStart = parser.eat("^");
    const body = parser.alternation();
    const anchoredEnd = parser.eat("$");
    if (!parser.done())
        throw new PatternError(`unsupported pattern syntax at offset ${parser.at} of ${pattern}`);
    // JSON Schema patterns are not anchored: an unanchored side may have any text.
    return [anchoredStart ? null : "char*", `(${body})`, anchoredEnd ? null : "char*"].filter(Boolean).join(" ");
}

const CLASS_ESCAPES = {d: "0-9", w: "a-zA-Z0-9_"};

class PatternParser {
    constructor(pattern) {
        this.pattern = pattern;
        this.at = 0;
    }

    done() {
        return this.at >= this.pattern.length;
    }

    peek() {
        return this.pattern[this.at];
    }

    eat(c) {
        if (this.pattern[this.at] === c) {
            this.at += 1;
            return true;
        }
        return false;
    }

    alternation() {
        const branches = [this.sequence()];
        while (this.eat("|"))
            branches.push(this.sequence());
        return branches.join(" | ");
    }

    sequence() {
        const terms = [];
        while (!this.done() && this.peek() !== "|" && this.peek() !== ")") {
            if (this.peek() === "$" && this.at === this.pattern.length - 1)
                break;
            const atom = this.atom();
            terms.push(atom + this.quantifier());
        }
        return terms.length ? terms.join(" ") : '""';
    }

    atom() {
        const c = this.pattern[this.at++];
        if (c === "(") {
            if (this.eat("?")) {
                if (!this.eat(":"))
                    throw new PatternError("lookaround and named groups are not supported");
            }
            const inner = this.alternation();
            if (!this.eat(")"))
                throw new PatternError("unclosed group");
            return `(${inner})`;
        }
        if (c === "[")
            return this.charClass();
        if (c === ".")
            return "char";
        if (c === "\\")
            return this.escape();
        if ("*+?{}])|^$".includes(c))
            throw new PatternError(`unexpected ${c}`);
        return jsonLiteral(c);
    }

    escape() {
        const c = this.pattern[this.at++];
        if (c === undefined)
            throw new PatternError("a pattern cannot end in a backslash");
        if (c in CLASS_ESCAPES)
            return `[${CLASS_ESCAPES[c]}]`;
        if (c === "s")
            return '(" " | "\\\\t" | "\\\\n" | "\\\\r")';
        if ("DWSbBkpPu123456789".includes(c))
            throw new PatternError(`\\${c} is not supported`);
        if (c === "t")
            return literal("\\t");
        if (c === "n")
            return literal("\\n");
        if (c === "r")
            return literal("\\r");
        return jsonLiteral(c);
    }

    charClass() {
        const negated = this.eat("^");
        let ranges = "";
        let unsafe = false; // the class holds a character that JSON text must escape
        const member = () => {
            let c = this.pattern[this.at++];
            if (c === "\\") {
                c = this.pattern[this.at++];
                if (c in CLASS_ESCAPES)
                    return {set: CLASS_ESCAPES[c]};
                if (c === undefined || "sSDWbB".includes(c))
                    throw new PatternError(`\\${c ?? ""} inside a class is not supported`);
                c = {t: "\t", n: "\n", r: "\r"}[c] ?? c;
            }
            const code = c.codePointAt(0);
            if (c === '"' || c === "\\" || code < 0x20 || code === 0x7f)
                unsafe = true;
            return {char: c};
        };
        let first = true;
        while (!this.done() && (this.peek() !== "]" || first)) {
            first = false;
            const start = member();
            if (start.set !== undefined) {
                ranges += start.set;
                continue;
            }
            if (this.peek() === "-" && this.pattern[this.at + 1] !== "]" && this.at + 1 < this.pattern.length) {
                this.at += 1;
                const end = member();
                if (end.set !== undefined)
                    throw new PatternError("a range cannot end in a class escape");
                ranges += `${classChar(start.char)}-${classChar(end.char)}`;
            } else {
                ranges += classChar(start.char);
            }
        }
        if (!this.eat("]"))
            throw new PatternError("unclosed character class");
        // A raw quote, backslash or control character cannot stand in JSON text: never generate one.
        if (negated)
            return `[^${ranges}"\\\\\\x00-\\x1F\\x7F]`;
        if (unsafe)
            throw new PatternError("a class holding a quote, backslash or control character is not supported");
        return `[${ranges}]`;
    }

    quantifier() {
        let out = "";
        const c = this.peek();
        if (c === "*" || c === "+" || c === "?") {
            this.at += 1;
            out = c;
        } else if (c === "{") {
            const match = /^\{(\d+)(,(\d*))?\}/.exec(this.pattern.slice(this.at));
            if (!match)
                throw new PatternError("malformed {n,m}");
            this.at += match[0].length;
            const min = Number(match[1]);
            const max = match[2] === undefined ? min : match[3] === "" ? null : Number(match[3]);
            out = repeat(min, max);
        }
        if (out)
            this.eat("?"); // a lazy quantifier matches the same language
        return out;
    }
}

// One character inside a GBNF class: llama.cpp's parser knows only the escapes \\ \" \[ \] \t \n \r \xHH, so
// a literal "-" or "^" (range and negation marks) is written in hex.
function classChar(c) {
    if (c === "]" || c === "[" || c === "\\" || c === '"')
        return `\\${c}`;
    const code = c.codePointAt(0);
    if (c === "-" || c === "^" || code < 0x20 || code === 0x7f)
        return `\\x${code.toString(16).padStart(2, "0")}`;
    return c;
}

// A character of the string's value, written as it appears inside JSON text.
function jsonLiteral(c) {
    return literal(JSON.stringify(c).slice(1, -1));
}

// `node schema.mjs < schema.json` prints the grammar and what was dropped (used by the unit tests).
if (process.argv[1] != null && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
    const chunks = [];
    for await (const chunk of process.stdin)
        chunks.push(chunk);
    try {
        const input = JSON.parse(Buffer.concat(chunks).toString("utf8") || "null");
        process.stdout.write(JSON.stringify(toGrammar(input)));
    } catch (error) {
        process.stdout.write(JSON.stringify({error: String(error.message ?? error)}));
        process.exitCode = 2;
    }
}
