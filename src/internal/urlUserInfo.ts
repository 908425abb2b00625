/**
 * The `user:password@` a URL may carry before its host: a secret that no message, log line, span
 * or metric label may show. Text, not a parsed `URL`, so that a server that does not parse (said
 * in an error for exactly that) is shown without it too.
 *
 * @internal
 */

// Up to the last `@` before the path, query or fragment, as the WHATWG URL parser splits it.
const UserInfo = /^([a-z][a-z0-9+.-]*:\/\/)?[^/?#]*@/i

/** `url` as it may be shown: `https://admin:pw@host:6443` → `https://host:6443`. */
export const withoutUserInfo = (url: string): string => url.replace(UserInfo, (_, scheme?: string) => scheme ?? "")
