/**
 * Form-mode elicitation to the specification: the schema subset, secrets kept out, answers checked.
 *
 * `form(schema)` refuses, when the form is defined, anything outside the subset the specification
 * allows for `requestedSchema` — a flat object of strings (`minLength`, `maxLength`, `format` =
 * email, uri, date, date-time), numbers and integers (`minimum`, `maximum`), booleans, single-select
 * enums (`enum`, or `oneOf` of `{const, title}`) and multi-select arrays (`items.enum` or
 * `items.anyOf` of `{const, title}`, `minItems`, `maxItems`), each with `title`, `description` and a
 * fitting `default` — and any field whose name, title, description, format or option titles look
 * like a secret, which only URL mode may collect. The words are read after folding NFKC, accents,
 * invisible format characters and the Cyrillic and Greek letters that look like Latin ones (a small
 * explicit table, `CONFUSABLES`), so "Pаssword" with a Cyrillic "а" is a password.
 * `check(schema, content)` checks an answer field by field, in words for the person answering. The
 * same rules as the Python library's `elicitd_client.forms`; both are tested against one list of
 * cases (`tests/client/secret_fields.json`).
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type FormSchema = {
  type: "object";
  properties: Record<string, Record<string, Json>>;
  required?: string[];
};

export class FormSchemaError extends TypeError {}
export class SecretField extends FormSchemaError {}

export type InputResult<T> =
  | { action: "accept"; data: T }
  | { action: "decline" }
  | { action: "cancel" };

export interface Form<T = Record<string, Json>> {
  readonly schema: FormSchema;
  readonly message: string;
  readonly tag: string;
  /** Optional extra validation/conversion after the schema checks (e.g. a zod parse). */
  readonly parse?: (values: Record<string, Json>) => T;
}

const COMMON = ["type", "title", "description", "default"];
const ALLOWED: Record<string, string[]> = {
  string: [...COMMON, "minLength", "maxLength", "format"],
  number: [...COMMON, "minimum", "maximum"],
  integer: [...COMMON, "minimum", "maximum"],
  boolean: COMMON,
  single: [...COMMON, "enum", "enumNames", "oneOf"],
  multi: [...COMMON, "items", "minItems", "maxItems"],
};
export const FORMATS = ["email", "uri", "date", "date-time"];

// Words (or up to three adjacent words run together) of a field's texts that mean a secret. A
// password hint counts as a password: hints are often the password itself.
const SECRET_WORDS: Record<string, string> = {
  password: "a password", passwd: "a password", pwd: "a password", pw: "a password", passphrase: "a password",
  passcode: "a password", secret: "a secret", token: "a token", key: "a key", keys: "a key", apikey: "an API key",
  apikeys: "an API key", accesskey: "an access key", privatekey: "a private key", sshkey: "an SSH key",
  credential: "a credential", credentials: "a credential", cardnumber: "a card number", cardno: "a card number",
  "card#": "a card number", "cc#": "a card number", creditcard: "a card number", debitcard: "a card number",
  ccnumber: "a card number", pan: "a card number", cvc: "a card security code", cvv: "a card security code",
  cvv2: "a card security code", cvc2: "a card security code", securitycode: "a card security code",
  iban: "a bank account number", accountnumber: "a bank account number", routingnumber: "a bank account number",
  ssn: "a social security number", socialsecurity: "a social security number",
  socialsecuritynumber: "a social security number", pin: "a PIN", otp: "a one-time code", totp: "a one-time code",
  hotp: "a one-time code", "2fa": "a one-time code", mfa: "a one-time code", onetimecode: "a one-time code",
  onetimepassword: "a one-time code", verificationcode: "a one-time code", authcode: "a one-time code",
  recoverycode: "a recovery code", backupcode: "a recovery code", recoverycodes: "a recovery code",
  backupcodes: "a recovery code", seedphrase: "a wallet seed phrase", recoveryphrase: "a wallet seed phrase",
  mnemonic: "a wallet seed phrase",
};
// Phrases with a secret word in them that ask for nothing secret; matched first, longest first.
const ORDINARY_PHRASES = new Set(["keysignature", "musicalkey", "sortkey", "keyinsight", "keyinsights"]);
// Letters of other scripts that render like Latin ones, folded to those. Not Unicode's whole
// confusables table: the Cyrillic and Greek lookalikes of the letters the secret words use.
const CONFUSABLE_FROM = "аеорсухіјѕԁһԛԝӏкАВЕКМНОРСТХУІЈЅԚԜ" + "αοριυνκτχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ";
const CONFUSABLE_TO = "aeopcyxijsdhqwlkABEKMHOPCTXYIJSQW" + "aopiuvktxABEZHIKMNOPTYX";
const CONFUSABLES = new Map([...CONFUSABLE_FROM].map((c, i) => [c, CONFUSABLE_TO[i] ?? c]));

const isCount = (v: unknown): boolean => typeof v === "number" && Number.isInteger(v) && v >= 0;
const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isRecord = (v: unknown): v is Record<string, Json> => v !== null && typeof v === "object" && !Array.isArray(v);

/** `text` as the words a reader sees: compatibility forms, lookalike letters, accents and
 *  invisible format characters folded away. */
function fold(text: string): string {
  const folded = [...text.normalize("NFKC")].map((c) => CONFUSABLES.get(c) ?? c).join("");
  return folded.normalize("NFD").replace(/[\p{Mn}\p{Cf}]/gu, "");
}

function words(text: string): string[] {
  return fold(text)
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replaceAll("#", " # ")
    .toLowerCase()
    .split(/[^a-z0-9#]+/)
    .filter(Boolean);
}

/** What `text` names, read left to right, longest phrase first ("sort key" is ordinary, "api key"
 *  an API key rather than a key). */
function secretIn(text: string): string | undefined {
  const w = words(text);
  let start = 0;
  scan: while (start < w.length) {
    for (const size of [3, 2, 1]) {
      if (start + size > w.length) continue;
      const phrase = w.slice(start, start + size).join("");
      if (ORDINARY_PHRASES.has(phrase)) {
        start += size;
        continue scan;
      }
      const found = SECRET_WORDS[phrase];
      if (found !== undefined) return found;
    }
    start += 1;
  }
  return undefined;
}

/** Every text of a field a person reads or a model sees: title, description, format, the titles of
 *  its options (`oneOf`, `anyOf` and `items.anyOf`) and `enumNames`. */
function texts(prop: Record<string, Json>): string[] {
  const found = ["title", "description", "format"].map((key) => String(prop[key] ?? ""));
  const items = prop["items"];
  for (const source of [prop, isRecord(items) ? items : {}]) {
    for (const key of ["oneOf", "anyOf"]) {
      const entries = source[key];
      if (Array.isArray(entries)) for (const e of entries) if (isRecord(e)) found.push(String(e["title"] ?? ""));
    }
  }
  const names = prop["enumNames"];
  if (Array.isArray(names)) found.push(...names.map(String));
  return found;
}

function refuseSecret(name: string, prop: Record<string, Json>): void {
  let found: string | undefined;
  for (const text of [name, ...texts(prop)]) found ??= secretIn(text);
  if (prop["writeOnly"] === true || prop["format"] === "password") found ??= "a password";
  if (found !== undefined) {
    throw new SecretField(
      `Field '${name}' looks like ${found}. Form mode must never collect passwords, API keys, tokens or payment ` +
        "data: the MCP client and its model see every answer. Ask for it in URL mode instead, where the user types " +
        "it on elicitd's page: elicitd.requireApiKey(ctx, { provider }) for a key the user types, " +
        "elicitd.requireToken(ctx, { provider }) for an account to connect.",
    );
  }
}

function kindOf(prop: Record<string, Json>): string {
  const type = prop["type"];
  if (type === "string" && ("enum" in prop || "oneOf" in prop)) return "single";
  if (type === "array") return "multi";
  if (type === "string" || type === "number" || type === "integer" || type === "boolean") return type;
  throw new FormSchemaError(`type ${JSON.stringify(type)} is not a form field (string, number, integer, boolean, enum, array)`);
}

function options(prop: Record<string, Json>, plain: string, titled: string): string[] {
  if ((plain in prop) === (titled in prop)) {
    throw new FormSchemaError(`give the options as ${plain} or as ${titled} (of const and title), one of them`);
  }
  const values = prop[plain];
  if (plain in prop) {
    if (!Array.isArray(values) || values.length === 0 || !values.every((v) => typeof v === "string")) {
      throw new FormSchemaError(`${plain} must be a non-empty list of strings`);
    }
    return values as string[];
  }
  const entries = prop[titled];
  if (!Array.isArray(entries) || entries.length === 0) throw new FormSchemaError(`${titled} must be a non-empty list`);
  return entries.map((entry) => {
    if (!isRecord(entry) || Object.keys(entry).sort().join() !== "const,title" || typeof entry["const"] !== "string" || typeof entry["title"] !== "string") {
      throw new FormSchemaError(`each ${titled} entry is exactly {const, title}, both strings`);
    }
    return entry["const"];
  });
}

function checkProperty(name: string, prop: Record<string, Json>): void {
  try {
    const kind = kindOf(prop);
    const unknown = Object.keys(prop).filter((key) => !ALLOWED[kind]?.includes(key));
    if (unknown.length) throw new FormSchemaError(`${unknown.sort().join(", ")} not allowed on a ${kind} field`);
    for (const key of ["title", "description"]) if (key in prop && typeof prop[key] !== "string") throw new FormSchemaError(`${key} must be a string`);
    const counts = (...keys: string[]): void => {
      for (const key of keys) if (key in prop && !isCount(prop[key])) throw new FormSchemaError(`${key} must be a non-negative integer`);
    };
    if (kind === "string") {
      counts("minLength", "maxLength");
      if ("format" in prop && !FORMATS.includes(String(prop["format"]))) {
        throw new FormSchemaError(`format ${JSON.stringify(prop["format"])} is not one of ${FORMATS.join(", ")}`);
      }
    } else if (kind === "number" || kind === "integer") {
      for (const key of ["minimum", "maximum"]) if (key in prop && !isNumber(prop[key])) throw new FormSchemaError(`${key} must be a number`);
    } else if (kind === "single") {
      options(prop, "enum", "oneOf");
      const names = prop["enumNames"];
      if ("enumNames" in prop && (!Array.isArray(names) || !Array.isArray(prop["enum"]) || names.length !== prop["enum"].length)) {
        throw new FormSchemaError("enumNames must name each enum value");
      }
    } else if (kind === "multi") {
      const items = prop["items"];
      if (!isRecord(items) || Object.keys(items).some((k) => !["type", "enum", "anyOf"].includes(k))) {
        throw new FormSchemaError("items must be {type: string, enum: [...]} or {anyOf: [{const, title}]}");
      }
      if ("enum" in items && items["type"] !== "string") throw new FormSchemaError("items with enum must be of type string");
      options(items, "enum", "anyOf");
      counts("minItems", "maxItems");
    }
    if ("default" in prop) {
      const { reasons } = check({ type: "object", properties: { [name]: prop } }, { [name]: prop["default"] ?? null });
      if (reasons.length) throw new FormSchemaError(`the default does not fit: ${reasons[0]}`);
    }
  } catch (error) {
    if (error instanceof FormSchemaError && !(error instanceof SecretField)) throw new FormSchemaError(`Field '${name}': ${error.message}`);
    throw error;
  }
}

/** Throws `FormSchemaError` (or `SecretField`) unless `schema` is in the form-mode subset. */
export function validateSchema(schema: unknown): asserts schema is FormSchema {
  if (!isRecord(schema) || schema["type"] !== "object" || Object.keys(schema).some((k) => !["type", "properties", "required", "$schema"].includes(k))) {
    throw new FormSchemaError("A form schema is a flat object: type, properties and required only");
  }
  const properties = schema["properties"];
  if (!isRecord(properties) || Object.keys(properties).length === 0) throw new FormSchemaError("A form schema needs at least one property");
  const required = schema["required"] ?? [];
  if (!Array.isArray(required) || required.some((name) => typeof name !== "string" || !(name in properties))) {
    throw new FormSchemaError("'required' must list properties of the form");
  }
  for (const [name, prop] of Object.entries(properties)) {
    if (!isRecord(prop)) throw new FormSchemaError(`Field '${name}': not a schema`);
    refuseSecret(name, prop);
    checkProperty(name, prop);
  }
}

function hashTag(text: string): string {
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193;
  for (let i = 0; i < text.length; i++) {
    h1 = Math.imul(h1 ^ text.charCodeAt(i), 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ text.charCodeAt(i), 0x5bd1e995) >>> 0;
  }
  return h1.toString(16).padStart(8, "0") + h2.toString(16).padStart(8, "0");
}

/** A checked form. Define it at module level so a bad schema fails when the tool is defined. */
export function form<T = Record<string, Json>>(
  schema: unknown,
  options: { message?: string; parse?: (values: Record<string, Json>) => T } = {},
): Form<T> {
  const copy: unknown = JSON.parse(JSON.stringify(schema));
  validateSchema(copy);
  const message = options.message ?? "Please fill in this form.";
  const built = { schema: copy, message, tag: hashTag(JSON.stringify([message, copy])) };
  return options.parse ? { ...built, parse: options.parse } : built;
}

const EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
const DATE_TIME = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

function isDate(value: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(value)) return false;
  const parsed = new Date(value + "T00:00:00Z");
  return !Number.isNaN(parsed.getTime()) && parsed.toISOString().startsWith(value);
}

function choices(prop: Record<string, Json>): string[] {
  if (Array.isArray(prop["enum"])) return prop["enum"].map(String);
  const entries = prop["oneOf"] ?? prop["anyOf"];
  return Array.isArray(entries) ? entries.map((e) => String(isRecord(e) ? e["const"] : "")) : [];
}

function checkValue(prop: Record<string, Json>, value: Json): string | undefined {
  const type = prop["type"];
  if (type === "boolean") return typeof value === "boolean" ? undefined : "must be true or false";
  if (type === "number" || type === "integer") {
    if (!isNumber(value) || (type === "integer" && !Number.isInteger(value))) return type === "integer" ? "must be a whole number" : "must be a number";
    if (isNumber(prop["minimum"]) && value < prop["minimum"]) return `must be at least ${prop["minimum"]}`;
    if (isNumber(prop["maximum"]) && value > prop["maximum"]) return `must be at most ${prop["maximum"]}`;
    return undefined;
  }
  if (type === "array") {
    const allowed = isRecord(prop["items"]) ? choices(prop["items"]) : [];
    if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) return "must be a list of choices";
    const outside = value.filter((v) => !allowed.includes(v as string));
    if (outside.length) return `has choices that are not offered: ${outside.map((v) => `'${String(v)}'`).join(", ")}`;
    if (new Set(value).size !== value.length) return "lists a choice twice";
    if (isNumber(prop["minItems"]) && value.length < prop["minItems"]) return `needs at least ${prop["minItems"]} choices`;
    if (isNumber(prop["maxItems"]) && value.length > prop["maxItems"]) return `allows at most ${prop["maxItems"]} choices`;
    return undefined;
  }
  if (typeof value !== "string") return "must be text";
  if ("enum" in prop || "oneOf" in prop) return choices(prop).includes(value) ? undefined : "must be one of the offered choices";
  const length = [...value].length;
  if (isNumber(prop["minLength"]) && length < prop["minLength"]) return `must be at least ${prop["minLength"]} characters`;
  if (isNumber(prop["maxLength"]) && length > prop["maxLength"]) return `must be at most ${prop["maxLength"]} characters`;
  switch (prop["format"]) {
    case "email":
      return EMAIL.test(value) ? undefined : "must be an email address";
    case "uri": {
      const ok = /^[A-Za-z][A-Za-z0-9+.-]*:\S+$/.test(value);
      return ok ? undefined : "must be a full URL";
    }
    case "date":
      return isDate(value) ? undefined : "must be a date (YYYY-MM-DD)";
    case "date-time":
      return DATE_TIME.test(value) && isDate(value.slice(0, 10)) && !Number.isNaN(Date.parse(value.replace(" ", "T")))
        ? undefined
        : "must be a date and time with its offset (YYYY-MM-DDTHH:MM:SSZ)";
    default:
      return undefined;
  }
}

/** `content` against the form: the values to use (defaults filled in, unknown fields left out)
 *  and the reasons it fails, in words for the person answering. Never throws. */
export function check(schema: FormSchema, content: unknown): { values: Record<string, Json>; reasons: string[] } {
  if (!isRecord(content)) return { values: {}, reasons: ["the answer must be the form's fields"] };
  const values: Record<string, Json> = {};
  const reasons: string[] = [];
  const required = new Set(schema.required ?? []);
  for (const [name, prop] of Object.entries(schema.properties)) {
    const label = typeof prop["title"] === "string" && prop["title"] ? prop["title"] : name;
    const value = content[name];
    if (value === undefined || value === null) {
      if ("default" in prop) values[name] = prop["default"] ?? null;
      else if (required.has(name)) reasons.push(`${label} is required`);
      continue;
    }
    const reason = checkValue(prop, value);
    if (reason !== undefined) reasons.push(`${label} ${reason}`);
    else values[name] = value;
  }
  return { values, reasons };
}

/** The message for an attempt: the form's own, plus why the last answer was refused. */
export function asking(form: Form<unknown>, reasons: string[]): string {
  return reasons.length ? `${form.message}\n\nPlease correct your answer: ${reasons.join("; ")}.` : form.message;
}

/** Read an answer into `T`: the schema checks, then the form's own `parse`. */
export function read<T>(form: Form<T>, content: unknown): { data?: T; reasons: string[] } {
  const { values, reasons } = check(form.schema, content);
  if (reasons.length) return { reasons };
  if (!form.parse) return { data: values as T, reasons: [] };
  try {
    return { data: form.parse(values), reasons: [] };
  } catch (error) {
    return { reasons: [error instanceof Error ? error.message : String(error)] };
  }
}
