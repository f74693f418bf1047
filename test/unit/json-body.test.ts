// Proves the request-body checks that JSON.parse skips: a key named twice, a number its double
// cannot carry, an unpaired surrogate and absurd nesting are refused with where they are; every
// body JSON.stringify writes from plain data passes; text that is not JSON is left to the decoder.
import { Worker } from "node:worker_threads"
import fc from "fast-check"
import { describe, expect, it, onTestFinished } from "vitest"
import { json_depth_max, json_members_max, jsonBodyProblem } from "../../domain/platform/json-body.ts"

/** A body whose `metadata` has `count` fields. */
const members = (count: number) =>
  `{"metadata":{${Array.from({ length: count }, (_, n) => `"k${n}":"v"`).join(",")}}}`

describe("jsonBodyProblem", () => {
  it.each([
    ['{"recipient":"a","amount":"1000000","amount":"0.02"}', "duplicate_key", "amount"],
    ['{"metadata":{"k":"1","k":"2"}}', "duplicate_key", "metadata.k"],
    ['{"a":1,"\\u0061":2}', "duplicate_key", "a"],
    ['[{"x":1},{"x":1,"x":1}]', "duplicate_key", "1.x"],
    ['{"amount":0.99999999999999999}', "amount_imprecise", "amount"],
    ['{"amount":1.0000000000000001}', "amount_imprecise", "amount"],
    ['{"amount":100.000000000000000009}', "amount_imprecise", "amount"],
    ['{"amount":1e400}', "amount_imprecise", "amount"],
    ['{"amount":1e-400}', "amount_imprecise", "amount"],
    [`{"amount":0.${"0".repeat(400)}1}`, "amount_imprecise", "amount"],
    [`{"amount":1${"0".repeat(400)}}`, "amount_imprecise", "amount"],
    ['{"transfer":{"amount":12345678901234567}}', "amount_imprecise", "transfer.amount"],
    ['{"grace_period_seconds":1.00000000000000001}', "number_imprecise", "grace_period_seconds"],
    ['{"note":"\\ud800"}', "invalid_string", "note"],
    ['{"metadata":{"k":"ok \\udfff"}}', "invalid_string", "metadata.k"],
    ['{"metadata":{"\\udfff":"v"}}', "invalid_string", "metadata.\ufffd"],
    [`${"[".repeat(json_depth_max + 2)}${"]".repeat(json_depth_max + 2)}`, "nested_too_deep", undefined],
    // One level too many, the innermost empty: as deep as with something inside.
    [`${"[".repeat(json_depth_max + 1)}${"]".repeat(json_depth_max + 1)}`, "nested_too_deep", undefined],
    [`${'{"a":'.repeat(json_depth_max)}{}${"}".repeat(json_depth_max)}`, "nested_too_deep", undefined],
    [members(json_members_max + 1), "too_many_members", "metadata"],
    [
      `{"events":[${Array.from({ length: json_members_max + 1 }, () => '"x"').join(",")}]}`,
      "too_many_members",
      "events",
    ],
    [`[${Array.from({ length: json_members_max + 1 }, () => "1").join(",")}]`, "too_many_members", undefined],
    [
      // Each object within bounds, the body not: 17 objects of 256 fields.
      `{${Array.from({ length: 17 }, (_, n) => `"o${n}":${members(json_members_max).slice('{"metadata":'.length, -1)}`).join(",")}}`,
      "too_many_members",
      undefined,
    ],
  ])("refuses %s as %s at %s", (text, code, param) => {
    const problem = jsonBodyProblem(text)
    expect(problem?.code).toBe(code)
    expect(problem?.param).toBe(param)
    expect(problem?.message.length).toBeGreaterThan(10)
    if (code === "duplicate_key") expect(problem?.message).toContain(`the field ${JSON.stringify(param)}`)
  })

  it.each([
    members(json_members_max),
    `{${Array.from({ length: 15 }, (_, n) => `"o${n}":${members(json_members_max).slice('{"metadata":'.length, -1)}`).join(",")}}`,
    `${"[".repeat(json_depth_max)}${"]".repeat(json_depth_max)}`,
    `${"[".repeat(json_depth_max)}1${"]".repeat(json_depth_max)}`,
    '{"amount":0.1}',
    '{"amount":"0.99999999999999999"}',
    '{"amount":1e2,"b":-0,"c":0.000001,"d":123456789012345}',
    '{"amount":1000000000000000000000000}',
    '{"amount":5e-324}',
    '{"note":"\\ud83d\\ude00 \\" \\\\ done"}',
    '{"a":{"a":{"a":1}},"b":[{"a":1},{"a":1}]}',
    '  [ 1 , true , false , null , "x" , { } , [ ] ]  ',
    "",
  ])("passes %s", (text) => {
    expect(jsonBodyProblem(text)).toBeUndefined()
  })

  it("answers a number with a megabyte of zeros inside it at once", async () => {
    // Trimming zeros with /0+$/ tried the pattern at each zero of a run that does not end the
    // number: about 10^12 steps for this body, minutes of a blocked event loop. Run in a worker so
    // that such a regression fails on the test's timeout instead of hanging the run.
    const zeros = "0".repeat(1_000_000)
    const bodies = [`{"amount":0.1${zeros}1}`, `{"amount":1.${zeros}1}`, `{"amount":1.${zeros}}`]
    const worker = new Worker(
      `const { parentPort, workerData } = require("node:worker_threads")
       import(workerData.module).then(({ jsonBodyProblem }) =>
         parentPort.postMessage(workerData.bodies.map((body) => jsonBodyProblem(body)?.code ?? null)))`,
      {
        eval: true,
        workerData: { module: new URL("../../domain/platform/json-body.ts", import.meta.url).href, bodies },
      },
    )
    onTestFinished(async () => {
      await worker.terminate()
    })
    const codes = await new Promise((resolve, reject) => {
      worker.once("message", resolve)
      worker.once("error", reject)
    })
    expect(codes).toEqual(["amount_imprecise", "amount_imprecise", null])
  })

  it.each(['{"a":', '{"a" 1}', "{'a':1}", "[1,]", "nul", '"open'])("leaves %s to the decoder", (text) => {
    expect(jsonBodyProblem(text)).toBeUndefined()
  })

  it("passes every body JSON.stringify writes from plain data", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (value) => {
        expect(jsonBodyProblem(JSON.stringify(value))).toBeUndefined()
        expect(jsonBodyProblem(JSON.stringify(value, null, 2))).toBeUndefined()
      }),
      { numRuns: 500 },
    )
  })

  it("finds a key repeated in any object of a body", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string({ minLength: 1, maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), {
          minKeys: 1,
        }),
        fc.jsonValue({ maxDepth: 2 }),
        (record, extra) => {
          const [key] = Object.keys(record) as [string]
          const repeated = `${JSON.stringify(record).slice(0, -1)},${JSON.stringify(key)}:${JSON.stringify(extra)}}`
          const problem = jsonBodyProblem(`{"outer":${repeated}}`)
          expect(problem?.code).toBe(key.isWellFormed() ? "duplicate_key" : "invalid_string")
          if (key.isWellFormed()) expect(problem?.param).toBe(`outer.${key}`)
        },
      ),
      { numRuns: 300 },
    )
  })

  /** A decimal numeral as an integer times a power of ten, by BigInt (an oracle apart from the code). */
  const asScaled = (text: string): { readonly units: bigint; readonly power: number } => {
    const [mantissa = "", exponent = "0"] = text.toLowerCase().split("e")
    const [whole = "", fraction = ""] = mantissa.split(".")
    return { units: BigInt(`${whole}${fraction}` || "0"), power: Number(exponent) - fraction.length }
  }
  const sameDecimal = (a: string, b: string): boolean => {
    const x = asScaled(a)
    const y = asScaled(b)
    const power = Math.min(x.power, y.power)
    return x.units * 10n ** BigInt(x.power - power) === y.units * 10n ** BigInt(y.power - power)
  }

  it("refuses exactly the numbers whose double names another decimal", () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 10n ** 30n }),
        fc.integer({ min: 0, max: 25 }),
        (units, decimals) => {
          const digits = units.toString().padStart(decimals + 1, "0")
          const text = decimals === 0 ? digits : `${digits.slice(0, -decimals)}.${digits.slice(-decimals)}`
          const exact = sameDecimal(text, String(Number(text)))
          expect(jsonBodyProblem(`{"amount":${text}}`)?.code).toBe(exact ? undefined : "amount_imprecise")
        },
      ),
      { numRuns: 2000 },
    )
  })
})
