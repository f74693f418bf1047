/**
 * The few protobuf wire-format pieces a Tron transaction needs: varints, length-delimited fields,
 * and a reader that splits a message into its fields. Encoding follows what protoc-generated code
 * does for proto3: fields in ascending number order, default values (0, empty bytes) left out, so
 * that the bytes (and therefore the txID) match any other conforming encoder byte for byte.
 */
import { concatBytes } from "@noble/hashes/utils.js"
import { assert } from "../../../domain/assert.ts"

const wire_varint = 0
const wire_length_delimited = 2
/** A varint carries at most 64 bits: ten groups of seven. */
const varint_length_max_bytes = 10
const int64_max = 2n ** 63n - 1n

/** One decoded field: a varint's value or a length-delimited field's bytes. */
export type ProtobufField =
  | { readonly number: number; readonly wire: "varint"; readonly value: bigint }
  | { readonly number: number; readonly wire: "bytes"; readonly value: Uint8Array }

/** A message does not follow the wire format (or uses a wire type Tron transactions never use). */
export class MalformedProtobuf extends Error {
  override readonly name = "MalformedProtobuf"
}

/**
 * The base-128 varint of a non-negative 64-bit integer.
 * @example encodeVarint(300n) // Uint8Array [0xac, 0x02]
 */
export function encodeVarint(value: bigint): Uint8Array {
  assert(value >= 0n && value <= 2n ** 64n - 1n, "a varint holds an unsigned 64-bit integer")
  const out: Array<number> = []
  let rest = value
  while (rest >= 0x80n) {
    out.push(Number(rest & 0x7fn) | 0x80)
    rest >>= 7n
  }
  out.push(Number(rest))
  return Uint8Array.from(out)
}

/**
 * An int64 field (Tron encodes amounts and times as int64); omitted when zero, as proto3 does.
 * Negative values never occur in the fields this adapter writes, so they are a programmer error.
 * @example int64Field(3, 1_000_000n)
 */
export function int64Field(number: number, value: bigint): Uint8Array {
  assert(value >= 0n && value <= int64_max, "an int64 field written here is in 0..2^63-1")
  if (value === 0n) return new Uint8Array(0)
  return concatBytes(tag(number, wire_varint), encodeVarint(value))
}

/**
 * A bytes, string or embedded-message field; omitted when empty, as proto3 does.
 * @example bytesField(1, Uint8Array.of(0xd5, 0x32))
 */
export function bytesField(number: number, value: Uint8Array): Uint8Array {
  if (value.length === 0) return new Uint8Array(0)
  return concatBytes(tag(number, wire_length_delimited), encodeVarint(BigInt(value.length)), value)
}

function tag(number: number, wire: number): Uint8Array {
  assert(Number.isInteger(number) && number > 0 && number < 2 ** 29, "a field number is in 1..2^29-1")
  return encodeVarint(BigInt(number * 8 + wire))
}

/**
 * Splits a message into its fields, in wire order. Throws `MalformedProtobuf` on truncated input,
 * overlong varints or wire types other than varint and length-delimited.
 * @example decodeFields(int64Field(8, 5n)) // [{ number: 8, wire: "varint", value: 5n }]
 */
export function decodeFields(message: Uint8Array): ReadonlyArray<ProtobufField> {
  const fields: Array<ProtobufField> = []
  let offset = 0
  while (offset < message.length) {
    const key = readVarint(message, offset)
    offset = key.next
    const number = Number(key.value >> 3n)
    const wire = Number(key.value & 7n)
    if (number === 0) throw new MalformedProtobuf("field number 0")
    if (wire === wire_varint) {
      const value = readVarint(message, offset)
      offset = value.next
      fields.push({ number, wire: "varint", value: value.value })
    } else if (wire === wire_length_delimited) {
      const length = readVarint(message, offset)
      const end = length.next + Number(length.value)
      if (length.value > BigInt(message.length) || end > message.length) {
        throw new MalformedProtobuf("a length-delimited field runs past the end")
      }
      fields.push({ number, wire: "bytes", value: message.slice(length.next, end) })
      offset = end
    } else {
      throw new MalformedProtobuf(`unsupported wire type ${wire}`)
    }
  }
  return fields
}

function readVarint(bytes: Uint8Array, start: number): { readonly value: bigint; readonly next: number } {
  let value = 0n
  for (let index = 0; index < varint_length_max_bytes; index += 1) {
    const byte = bytes[start + index]
    if (byte === undefined) throw new MalformedProtobuf("a varint runs past the end")
    value |= BigInt(byte & 0x7f) << BigInt(7 * index)
    if ((byte & 0x80) === 0) return { value, next: start + index + 1 }
  }
  throw new MalformedProtobuf("a varint longer than ten bytes")
}
