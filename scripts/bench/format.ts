// How the bench's reports print a number: fixed digits, and a dash for a measurement that was not taken.
export const fixed = (value: number | undefined, digits = 0): string =>
  value === undefined || Number.isNaN(value) ? '—' : value.toFixed(digits)
