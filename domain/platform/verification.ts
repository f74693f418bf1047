/**
 * Tenant verification (KYC/KYB). In the sandbox a simulated verifier decides at once and
 * deterministically from the submitted data, so integrators can test both outcomes:
 * - a registration number ending in `0000` is not found in the (simulated) company registry;
 * - a company or representative in a comprehensively sanctioned country (CU, IR, KP, SY) is refused;
 * - anything else is verified at KYC level 2 (business verified); level 3 also needs `documents`.
 * Production verification by a real provider plugs in behind the same decision type.
 */

export interface VerificationSubmission {
  readonly legal_name: string
  readonly registration_number: string
  /** ISO 3166-1 alpha-2, upper case. */
  readonly country: string
  readonly representative_name: string
  readonly representative_country: string
  /** References to uploaded documents (ids or URLs); optional. */
  readonly documents: ReadonlyArray<string>
}

export type VerificationDecision =
  | { readonly status: "verified"; readonly kyc_level: 2 | 3 }
  | {
      readonly status: "rejected"
      readonly kyc_level: 0
      readonly reason: "registry_mismatch" | "sanctioned_jurisdiction"
    }

/** Countries under comprehensive sanctions in the simulated verifier. */
export const sanctionedCountries: ReadonlyArray<string> = ["CU", "IR", "KP", "SY"]

/**
 * The simulated verifier's decision: a pure function of the submission.
 * @example simulateVerification({ ..., registration_number: "HRB 12345", country: "DE" }) // verified, level 2
 */
export function simulateVerification(submission: VerificationSubmission): VerificationDecision {
  if ([submission.country, submission.representative_country].some((c) => sanctionedCountries.includes(c))) {
    return { status: "rejected", kyc_level: 0, reason: "sanctioned_jurisdiction" }
  }
  if (/0000$/.test(submission.registration_number.trim())) {
    return { status: "rejected", kyc_level: 0, reason: "registry_mismatch" }
  }
  return { status: "verified", kyc_level: submission.documents.length > 0 ? 3 : 2 }
}
