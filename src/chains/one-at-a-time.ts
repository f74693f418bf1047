/**
 * A queue for the sandbox issuers' sends: what it is given runs one after another, in the order
 * given, each once the previous one settled (a failed one does not stop the next).
 * @example const queued = oneAtATime(); await Promise.all([queued(() => mint(a)), queued(() => mint(b))])
 */
export const oneAtATime = () => {
  let tail: Promise<unknown> = Promise.resolve()
  return <T>(work: () => Promise<T>): Promise<T> => {
    const run = tail.then(work)
    tail = run.catch(() => {})
    return run
  }
}
