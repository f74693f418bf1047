// Proves that limits documented in characters count Unicode code points: an emoji is one character,
// a lone surrogate is one, and the cheap length check agrees with the exact count.
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { characterCount, longerThan } from "../../src/http/handlers/common.ts"

describe("characterCount", () => {
  it.each([
    ["", 0],
    ["abc", 3],
    ["a😀", 2],
    ["😀".repeat(500), 500],
    ["\ud800", 1],
    ["\udc00\ud800", 2],
    ["é", 1],
  ])("%j has %i characters", (text, count) => {
    expect(characterCount(text)).toBe(count)
  })

  it("counts what the string iterator counts, for any string (lone surrogates included)", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: "binary", maxLength: 60 }),
        fc.integer({ min: 0, max: 70 }),
        (text, max) => {
          expect(characterCount(text)).toBe([...text].length)
          expect(longerThan(text, max)).toBe([...text].length > max)
        },
      ),
      { numRuns: 1000 },
    )
  })
})
