import { describe, expect, it } from "vitest"
import { allowedCpus, cpuList } from "../../bench/placement.ts"

describe("bench:api CPU placement", () => {
  it("reads the CPUs this process may use from /proc/self/status", () => {
    const status = "Name:\tnode\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n"
    expect(allowedCpus(status)).toEqual([0, 1])
    expect(allowedCpus("Cpus_allowed_list:\t0,2-4,7\n")).toEqual([0, 2, 3, 4, 7])
    expect(allowedCpus("Cpus_allowed_list:\t5\n")).toEqual([5])
    expect(allowedCpus("Name:\tnode\n")).toEqual([])
  })

  it("writes taskset lists with ranges folded", () => {
    expect(cpuList([1])).toBe("1")
    expect(cpuList([1, 2, 3])).toBe("1-3")
    expect(cpuList([1, 2, 3, 5, 7, 8])).toBe("1-3,5,7-8")
    expect(cpuList([])).toBe("")
  })

  it("places this machine's own CPU list back as it read it", () => {
    const cpus = allowedCpus("Cpus_allowed_list:\t0-3,6,9-10\n")
    expect(cpuList(cpus)).toBe("0-3,6,9-10")
  })
})
