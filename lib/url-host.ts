/** A URL's host as sockets take it: an IPv6 address without the brackets a URL writes it in. */
export const socketHost = (hostname: string): string => hostname.replace(/^\[|\]$/g, "");
