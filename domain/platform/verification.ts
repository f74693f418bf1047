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

/**
 * The 249 officially assigned ISO 3166-1 alpha-2 codes, and XK (Kosovo, user-assigned but used by
 * registries and banks). Anything else (XX, ZZ, AA, EU, UK) names no country a business is in.
 */
const countryCodes: ReadonlySet<string> = new Set(
  [
    "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ",
    "BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ",
    "CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ",
    "DE DJ DK DM DO DZ EC EE EG EH ER ES ET FI FJ FK FM FO FR",
    "GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY HK HM HN HR HT HU",
    "ID IE IL IM IN IO IQ IR IS IT JE JM JO JP KE KG KH KI KM KN KP KR KW KY KZ",
    "LA LB LC LI LK LR LS LT LU LV LY",
    "MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ",
    "NA NC NE NF NG NI NL NO NP NR NU NZ OM PA PE PF PG PH PK PL PM PN PR PS PT PW PY QA",
    "RE RO RS RU RW SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ",
    "TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ UA UG UM US UY UZ",
    "VA VC VE VG VI VN VU WF WS XK YE YT ZA ZM ZW",
  ]
    .join(" ")
    .split(" "),
)

/** Whether `code` is an assigned ISO 3166-1 alpha-2 country code, in upper case. */
export const isCountryCode = (code: string): boolean => countryCodes.has(code)

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
