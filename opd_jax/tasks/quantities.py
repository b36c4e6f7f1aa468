"""One quantity stated in several units, and the reasons a statement states no answer.

An answer is often stated with a restatement of itself: its parts ("7 dollars and 50 cents", "1 hour and 30
minutes"), a conversion ("5 km = 5000 m", "5000 m = 5 km", "2 hours, or 120 minutes", "1/2 = 50%"). Such a
statement states one quantity; the gold answer is a number in the unit the question asks for, which the grader
does not know. So the statement reads as that quantity in each unit it names (`Quantity`: 7.5 dollars = 750
cents), and a gold answer equal to any of those readings is credited, exactly the credit each restatement alone
would get (units are ignored: "5 km" alone reads 5); no single part is ever read as the answer (issue 49, item 1:
"7 dollars and 50 cents" read 7 or nothing, "5000 m = 5 km" read 5000). A statement whose parts or restatements
do not make one quantity by the unit table (`UNITS`: "5 km = 500 m", "2 bolts and 3 bolts", "3 dozen = 36
eggs", "2.5 hours and 30 minutes") states no answer, with the reason (`Refused`).

Unit sizes are exact by definition: money, a hundredth for the minor unit (cent, penny); time, SI seconds (a
month and a year have no fixed size); length, the metre, with the inch 0.0254 m and the pound 453.59237 g exactly
(the international yard and pound agreement of 1959); US customary volumes from the gallon, 231 cubic inches
(3.785411784 L); a percent, a hundredth of a bare number. A ton (short, long or metric) has no fixed size.
"""
import fractions

Fraction = fractions.Fraction
_INCH, _POUND, _GALLON_ML = Fraction("0.0254"), Fraction("453.59237"), Fraction("3785.411784")
# (dimension, size in the dimension's base unit, or None: no fixed size, names: the first is the unit's own, the
# others as statements._unit finds them: singular, lower case, a currency sign as "$")
_TABLE = [
    ("money", Fraction(1), "dollar $ buck"), ("money", Fraction(1), "euro"),
    ("money", Fraction(1, 100), "cent penny pennie pence"),
    ("time", Fraction(1), "second sec"), ("time", Fraction(60), "minute min"),
    ("time", Fraction(3600), "hour hr h"), ("time", Fraction(86400), "day"), ("time", Fraction(604800), "week"),
    ("time", None, "month"), ("time", None, "year yr"),
    ("length", Fraction(1, 1000), "millimeter mm millimetre"), ("length", Fraction(1, 100), "centimeter cm centimetre"),
    ("length", Fraction(1), "meter m metre"), ("length", Fraction(1000), "kilometer km kilometre"),
    ("length", _INCH, "inch inche"), ("length", 12 * _INCH, "foot feet ft"), ("length", 36 * _INCH, "yard yd"),
    ("length", 63360 * _INCH, "mile"),
    ("mass", Fraction(1), "gram g"), ("mass", Fraction(1000), "kilogram kg"), ("mass", _POUND, "pound lb"),
    ("mass", _POUND / 16, "ounce oz"), ("mass", Fraction(10**6), "tonne"), ("mass", None, "ton"),
    ("volume", Fraction(1), "milliliter ml millilitre"), ("volume", Fraction(1000), "liter l litre"),
    ("volume", _GALLON_ML, "gallon"), ("volume", _GALLON_ML / 4, "quart"), ("volume", _GALLON_ML / 8, "pint"),
    ("volume", _GALLON_ML / 16, "cup"), ("volume", _GALLON_ML / 256, "tablespoon tbsp"),
    ("volume", _GALLON_ML / 768, "teaspoon tsp"),
    ("ratio", Fraction(1), ""), ("ratio", Fraction(1, 100), "%"),
]
UNITS = {names.split()[0] if names else "": (dim, size) for dim, size, names in _TABLE}
_CANONICAL = {name: (names.split() or [""])[0] for _, _, names in _TABLE for name in names.split()}


def canonical(unit: str) -> str:
  """A unit's own name in `UNITS` ("hrs" -> "hour", "$" -> "dollar", "m^2" -> "meter^2"); another word as given."""
  base, caret, power = unit.partition("^")
  return _CANONICAL.get(base, base) + caret + power


class Refused(str):
  """A statement that states no single value, read as no answer: the reason, in words ("a hedge: 2 or 3")."""


class Quantity(tuple):
  """One quantity in each unit a statement names: ((value, unit), ...), in the order stated, one per unit."""

  def __str__(self) -> str:
    from opd_jax.tasks import answers  # pylint: disable=g-import-not-at-top  (answers imports this module)
    return " = ".join(answers.format_number(v) + ("%" if u == "%" else f" {u}" if u else "")
                      for v, u in self)


def _info(unit: str) -> tuple[str, Fraction | None] | None:
  """(dimension, size) of a unit of `UNITS` or of its square or cube (`m^2`: ("length^2", 1)), else None."""
  base, _, power = unit.partition("^")
  if base not in UNITS or power not in ("", "2", "3"):
    return None
  dim, size = UNITS[base]
  n = int(power or 1)
  return (dim if n == 1 else f"{dim}^{n}"), (None if size is None else size ** n)


def dimension(unit: str) -> str | None:
  """The dimension of a unit of `UNITS` or its square or cube ("length", "length^2"), or None for another unit."""
  info = _info(unit)
  return None if info is None else info[0]


def size(unit: str) -> Fraction | None:
  """The size of a unit in its dimension's base unit (`UNITS`), or None (another unit, or no fixed size)."""
  info = _info(unit)
  return None if info is None else info[1]


def convertible(a: str, b: str) -> bool:
  """Whether units `a` and `b` are different units of one dimension, both of a fixed size."""
  return a != b and dimension(a) is not None and dimension(a) == dimension(b) and None not in (size(a), size(b))


def same(readings: list[tuple[Fraction, str]], what: str):
  """The quantity that `readings` ((value, unit) pairs, each stating it) state: a Quantity (one reading per unit),
  a Fraction when they name one unit, or Refused when they disagree or name units that cannot be compared."""
  out = {}
  for value, unit in readings:
    if unit in out and out[unit] != value:
      return Refused(f"two values in one unit: {what}")
    out.setdefault(unit, value)
  units = list(out)
  if len(set(out.values())) == 1:
    return out[units[0]]                                # one number in any unit ("180 rings, or 180 years")
  if not all(u == units[0] or convertible(u, units[0]) for u in units):
    return Refused(f"a restatement in units without an exact conversion: {what}")
  if len({out[u] * size(u) for u in units}) > 1:
    return Refused(f"a restatement in another unit that disagrees: {what}")
  return Quantity((out[u], u) for u in units)


def parts(readings: list[tuple[Fraction, str]], what: str):
  """The quantity whose parts are `readings` ("7 dollars and 50 cents": [(7, dollar), (50, cent)]): a Quantity in
  each of their units, or Refused unless the units are of one dimension with fixed sizes, strictly decreasing,
  every part but the last a whole number and each later part less than one of the unit before it."""
  units = [u for _, u in readings]
  if len(set(units)) == 1:
    return Refused(f"several quantities of one unit: {what}")
  if not all(u == units[0] or convertible(u, units[0]) for u in units):
    return Refused(f"several quantities, not the parts of one: {what}")
  sizes = [size(u) for u in units]
  for i in range(1, len(readings)):
    if not (sizes[i] < sizes[i - 1] and 0 <= readings[i][0] < sizes[i - 1] / sizes[i]
            and readings[i - 1][0].denominator == 1):
      return Refused(f"parts that do not make one quantity: {what}")
  sign = -1 if readings[0][0] < 0 else 1              # "-7 dollars and 50 cents" is -7.50
  total = sign * sum(abs(v) * s for (v, _), s in zip(readings, sizes))
  return Quantity((total / s, u) for u, s in zip(units, sizes))
