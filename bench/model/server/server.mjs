// A GGUF model behind the OpenAI chat completions wire format, on 127.0.0.1 only, for bench.model_accuracy.
//
//   node server.mjs --model FILE.gguf --engine-dir DIR [--port N] [--model-name NAME] [--context-size N]
//                   [--threads N] [--json-schema reject|accept]
//
// DIR holds node_modules with node-llama-cpp (bench/model/install.py puts it there). Port 0 (the default, or
// PORT from the environment) takes a free port; the line "listening on http://127.0.0.1:PORT" on stdout says
// the model is loaded and requests are taken. Routes:
//   POST /v1/chat/completions  messages in; choices[0].message.content, finish_reason stop | length, usage
//   GET  /v1/models            the one model
//   GET  /stats                what was served so far (response formats, finish reasons, dropped schema keywords)
// response_format, as llama.cpp's server takes it:
//   {"type": "json_object", "schema": S}  output constrained by S (schema.mjs makes the grammar; see there)
//   {"type": "json_object"}               any JSON object
//   {"type": "json_schema", ...}          400, as llama.cpp answers; `--json-schema accept` takes its schema
//                                         like json_object's instead (for a worker that only speaks OpenAI's)
//   absent or {"type": "text"}            free text
// Greedy decoding unless the request sets a temperature: the same request gives the same answer. One
// generation at a time; others wait in arrival order. A client that goes away stops its generation.

import {createServer} from "node:http";
import {createRequire} from "node:module";
import {readFileSync} from "node:fs";
import {basename, dirname, join, resolve} from "node:path";
import {pathToFileURL} from "node:url";
import {randomBytes} from "node:crypto";
import {availableParallelism} from "node:os";
import {parseArgs} from "node:util";

import {toGrammar, SchemaError} from "./schema.mjs";

const {values: options} = parseArgs({
    options: {
        "model": {type: "string"},
        "engine-dir": {type: "string"},
        "port": {type: "string", default: process.env.PORT ?? "0"},
        "model-name": {type: "string"},
        "context-size": {type: "string", default: "8192"},
        "threads": {type: "string"},
        "json-schema": {type: "string", default: "reject"}
    }
});
if (!options.model || !options["engine-dir"]) {
    console.error("usage: node server.mjs --model FILE.gguf --engine-dir DIR [--port N] ...");
    process.exit(2);
}
if (!["reject", "accept"].includes(options["json-schema"])) {
    console.error("--json-schema takes reject or accept");
    process.exit(2);
}
const HOST = "127.0.0.1"; // never another interface: this is a benchmark's private provider
const MODEL_NAME = options["model-name"] ?? basename(options.model).replace(/\.gguf$/, "");
const CONTEXT_SIZE = Number.parseInt(options["context-size"], 10);
const MAX_BODY_BYTES = 8 * 1024 * 1024;

// node-llama-cpp is resolved from the engine folder, not from beside this file: the install lives in a cache.
const requireFromEngine = createRequire(join(resolve(options["engine-dir"]), "package.json"));
const engineEntry = requireFromEngine.resolve("node-llama-cpp");
// dist/index.js -> the package folder, for its version (the package exports no ./package.json).
const engineVersion = JSON.parse(readFileSync(join(dirname(dirname(engineEntry)), "package.json"), "utf8")).version;
const {getLlama, LlamaChat, LlamaLogLevel} = await import(pathToFileURL(engineEntry).href);

const started = Date.now();
// CPU only, and never a build: the platform package's prebuilt binary or a clear failure.
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.warn, progressLogs: false});
const model = await llama.loadModel({modelPath: options.model});
const context = await model.createContext({
    contextSize: CONTEXT_SIZE,
    sequences: 1,
    // One thread per core this process may use: more threads than cores spin at ggml's barriers and make
    // each token many times slower on a shared 2-core machine (measured: 9.7 s against 0.7 s for 18 tokens).
    threads: options.threads ? Number.parseInt(options.threads, 10) : availableParallelism()
});
const sequence = context.getSequence();
const chat = new LlamaChat({contextSequence: sequence});
const loadSeconds = (Date.now() - started) / 1000;

const stats = {
    engine: {name: "node-llama-cpp", version: engineVersion, build: llama.buildType, gpu: llama.gpu || "none"},
    model: MODEL_NAME,
    context_size: context.contextSize,
    threads: context.currentThreads,
    load_seconds: loadSeconds,
    json_schema: options["json-schema"],
    requests: 0,
    completions: 0,
    errors: {},
    response_formats: {},
    finish_reasons: {},
    prompt_tokens: 0,
    completion_tokens: 0,
    generation_seconds: 0,
    dropped_schema_keywords: {}
};

class HttpError extends Error {
    constructor(status, message, code, param = null) {
        super(message);
        this.status = status;
        this.code = code;
        this.param = param;
    }
}

function count(table, key) {
    table[key] = (table[key] ?? 0) + 1;
}

// ----------------------------------------------------------------------------------------------- grammars

const grammars = new Map(); // converted schema text -> grammar; the worker sends the same schema every time

async function grammarFor(responseFormat) {
    if (responseFormat == null)
        return {kind: "text", grammar: null};
    if (typeof responseFormat !== "object" || Array.isArray(responseFormat))
        throw new HttpError(400, "response_format must be an object", "invalid_response_format", "response_format");
    const type = responseFormat.type;
    if (type === "text")
        return {kind: "text", grammar: null};
    let schema;
    let kind;
    if (type === "json_object") {
        schema = responseFormat.schema;
        kind = schema == null ? "json_object" : "json_object+schema";
    } else if (type === "json_schema") {
        if (options["json-schema"] !== "accept")
            throw new HttpError(
                400,
                "response_format type json_schema is not supported by this server (as with llama.cpp's): " +
                    'send {"type": "json_object", "schema": ...} instead',
                "unsupported_response_format",
                "response_format"
            );
        schema = responseFormat.json_schema?.schema;
        if (schema == null)
            throw new HttpError(400, "json_schema.schema is missing", "invalid_response_format", "response_format");
        kind = "json_schema (accepted as json_object+schema)";
    } else {
        throw new HttpError(400, `unknown response_format type ${JSON.stringify(type)}`, "invalid_response_format", "response_format");
    }
    let converted;
    try {
        converted = toGrammar(schema ?? null); // no schema: any JSON object
    } catch (error) {
        if (error instanceof SchemaError)
            throw new HttpError(400, `the schema cannot be turned into a grammar: ${error.message}`, "invalid_schema", "response_format");
        throw error;
    }
    for (const {path, keyword} of converted.dropped)
        stats.dropped_schema_keywords[`${path} ${keyword}`] = keyword;
    // The grammar ends in four newlines after the JSON; they stop the generation and are trimmed off.
    return {
        kind,
        grammar: await cached(converted.grammar, () => llama.createGrammar({
            grammar: converted.grammar,
            stopGenerationTriggers: ["\n\n\n\n"],
            trimWhitespaceSuffix: true
        }))
    };
}

async function cached(key, make) {
    if (!grammars.has(key)) {
        if (grammars.size >= 32)
            grammars.delete(grammars.keys().next().value);
        grammars.set(key, await make());
    }
    return grammars.get(key);
}

// ------------------------------------------------------------------------------------------------ requests

function textOf(content, index) {
    if (typeof content === "string")
        return content;
    if (Array.isArray(content) && content.every((part) => part?.type === "text" && typeof part.text === "string"))
        return content.map((part) => part.text).join("");
    throw new HttpError(400, `messages[${index}].content must be a string or text parts`, "invalid_messages", "messages");
}

function historyOf(messages) {
    if (!Array.isArray(messages) || messages.length === 0)
        throw new HttpError(400, "messages must be a non-empty list", "invalid_messages", "messages");
    const history = messages.map((message, index) => {
        const text = textOf(message?.content, index);
        switch (message?.role) {
            case "system":
            case "developer":
                return {type: "system", text};
            case "user":
                return {type: "user", text};
            case "assistant":
                return {type: "model", response: [text]};
            default:
                throw new HttpError(400, `messages[${index}].role ${JSON.stringify(message?.role)} is not supported`, "invalid_messages", "messages");
        }
    });
    if (history.at(-1).type === "model")
        throw new HttpError(400, "the last message must not be the assistant's", "invalid_messages", "messages");
    return [...history, {type: "model", response: []}];
}

function limitOf(body) {
    const value = body.max_completion_tokens ?? body.max_tokens;
    if (value == null)
        return null;
    if (!Number.isInteger(value) || value < 1)
        throw new HttpError(400, "max_tokens must be a positive integer", "invalid_max_tokens", "max_tokens");
    return value;
}

function promptTokens(history) {
    const {contextText} = chat.chatWrapper.generateContextState({chatHistory: history});
    return contextText.tokenize(model.tokenizer).length;
}

let queue = Promise.resolve();
function oneAtATime(job) {
    const turn = queue.then(job, job);
    queue = turn.catch(() => {});
    return turn;
}

async function complete(body, signal) {
    if (body.stream)
        throw new HttpError(400, "stream is not supported", "unsupported_stream", "stream");
    if (body.n != null && body.n !== 1)
        throw new HttpError(400, "n must be 1", "unsupported_n", "n");
    const history = historyOf(body.messages);
    const requested = limitOf(body);
    const {kind, grammar} = await grammarFor(body.response_format);
    const temperature = typeof body.temperature === "number" ? body.temperature : 0;
    return oneAtATime(async () => {
        if (signal.aborted)
            throw new HttpError(499, "the client went away", "client_closed");
        const prompt = promptTokens(history);
        const room = context.contextSize - prompt;
        if (room < 1)
            throw new HttpError(400, `the prompt has ${prompt} tokens; the context holds ${context.contextSize}`, "context_length_exceeded", "messages");
        // Never past the context: shifting it would drop the start of the prompt, the instructions.
        const maxTokens = Math.min(requested ?? room, room);
        const outputBefore = sequence.tokenMeter.usedOutputTokens;
        const began = Date.now();
        const result = await chat.generateResponse(history, {
            grammar: grammar ?? undefined,
            maxTokens,
            temperature,
            ...(typeof body.seed === "number" ? {seed: body.seed} : {}),
            ...(typeof body.top_p === "number" ? {topP: body.top_p} : {}),
            signal
        });
        const seconds = (Date.now() - began) / 1000;
        const completion = sequence.tokenMeter.usedOutputTokens - outputBefore;
        const finish = result.metadata.stopReason === "maxTokens" ? "length" : "stop";
        count(stats.response_formats, kind);
        count(stats.finish_reasons, finish);
        stats.completions += 1;
        stats.prompt_tokens += prompt;
        stats.completion_tokens += completion;
        stats.generation_seconds += seconds;
        console.error(`completion ${stats.completions}: ${kind}, ${prompt} prompt + ${completion} completion tokens, ${seconds.toFixed(1)} s, ${finish}`);
        return {
            id: `chatcmpl-${randomBytes(12).toString("hex")}`,
            object: "chat.completion",
            created: Math.floor(Date.now() / 1000),
            model: MODEL_NAME,
            system_fingerprint: `node-llama-cpp-${engineVersion}`,
            choices: [
                {
                    index: 0,
                    message: {role: "assistant", content: result.response, refusal: null},
                    logprobs: null,
                    finish_reason: finish
                }
            ],
            usage: {prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion}
        };
    });
}

// ---------------------------------------------------------------------------------------------------- HTTP

function send(res, status, payload, requestId) {
    const text = JSON.stringify(payload);
    res.writeHead(status, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(text),
        "x-request-id": requestId
    });
    res.end(text);
}

function sendError(res, error, requestId) {
    const status = error instanceof HttpError ? error.status : 500;
    const code = error instanceof HttpError ? error.code : "server_error";
    count(stats.errors, code);
    if (!(error instanceof HttpError))
        console.error(`request ${requestId} failed:`, error);
    if (res.destroyed)
        return;
    send(res, status, {
        error: {
            message: error instanceof HttpError ? error.message : "the engine failed on this request",
            type: status >= 500 ? "server_error" : "invalid_request_error",
            param: error instanceof HttpError ? error.param : null,
            code
        }
    }, requestId);
}

async function readJson(req) {
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
        size += chunk.length;
        if (size > MAX_BODY_BYTES)
            throw new HttpError(413, "the request body is too large", "body_too_large");
        chunks.push(chunk);
    }
    try {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        if (body === null || typeof body !== "object" || Array.isArray(body))
            throw new Error("not an object");
        return body;
    } catch {
        throw new HttpError(400, "the body must be a JSON object", "invalid_json");
    }
}

const server = createServer(async (req, res) => {
    const requestId = `req_${randomBytes(8).toString("hex")}`;
    stats.requests += 1;
    const path = new URL(req.url ?? "/", `http://${HOST}`).pathname;
    try {
        if (path === "/v1/chat/completions") {
            if (req.method !== "POST")
                throw new HttpError(405, "use POST", "method_not_allowed");
            const body = await readJson(req);
            const aborter = new AbortController();
            res.on("close", () => {
                if (!res.writableEnded)
                    aborter.abort(new HttpError(499, "the client went away", "client_closed"));
            });
            send(res, 200, await complete(body, aborter.signal), requestId);
        } else if (path === "/v1/models") {
            if (req.method !== "GET")
                throw new HttpError(405, "use GET", "method_not_allowed");
            send(res, 200, {
                object: "list",
                data: [{id: MODEL_NAME, object: "model", created: Math.floor(started / 1000), owned_by: "local"}]
            }, requestId);
        } else if (path === "/stats" && req.method === "GET") {
            send(res, 200, stats, requestId);
        } else {
            throw new HttpError(404, `no route ${req.method} ${path}`, "not_found");
        }
    } catch (error) {
        sendError(res, error, requestId);
    }
});

function stop() {
    server.close();
    server.closeAllConnections();
    // Freeing the engine can take seconds after an aborted generation; the OS frees it as well.
    setTimeout(() => process.exit(0), 3000).unref();
    llama.dispose().finally(() => process.exit(0));
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

server.listen(Number.parseInt(options.port, 10), HOST, () => {
    const {port} = server.address();
    console.error(`${MODEL_NAME} loaded in ${loadSeconds.toFixed(1)} s: node-llama-cpp ${engineVersion} (${llama.buildType}, CPU), context ${context.contextSize} tokens, ${context.currentThreads} threads`);
    console.log(`listening on http://${HOST}:${port}`);
});
