"""Gravity's language, rule by rule: what its compiler accepts (src/g_lang.l and src/g_lang.y of
Givargis's release) nnbuild accepts, with the same values, and what it refuses nnbuild refuses in one
line `file:line:column: message`. nnbuild's deviations (declared layer order, `tanh`, CR and a
final comment without newline, sizes and batch of at least 1, stricter names, the rate floor) are
tested as such."""

import pytest

from nnbuild.errors import NNBuildError
from nnbuild.frontends import gravity_g

REST = '.input 2; .hidden 3 relu; .output 2 softmax;'


def g(text):
    return gravity_g.parse("t.g", text)


def refused(text, *words, where=None):
    with pytest.raises(NNBuildError) as error:
        g(text)
    message = str(error.value)
    assert "\n" not in message and message.startswith("t.g:"), message
    if where:
        assert message.startswith(f"t.g:{where}: "), message
    for word in words:
        assert word in message, message
    return message


# ------------------------------------------------------------------------------- the lexer (g_lang.l)


@pytest.mark.parametrize("text", [
    '.module "m"; .prefix "p"; .optimizer sgd 0.5; .precision float; .costfnc quadratic; .batch 2; ' + REST,
    '.module"m";.prefix"p";.optimizer sgd 0.5;.precision double;.costfnc exponential;.batch 2;.input 2;'
    '.hidden 3 relu;.output 2 sigmoid;',
])
def test_directives_are_fixed_strings_that_need_no_separator(text):
    model = g(text)
    assert (model.name, model.prefix, model.learning_rate, model.batch) == ("m", "p", 0.5, 2)


@pytest.mark.parametrize("text, check", [
    ('.module "m"; .optimizer sgd.5; ' + REST, lambda m: m.learning_rate == 0.5),
    ('.module "m"; .optimizersgd 0.25; ' + REST, lambda m: m.learning_rate == 0.25),
    ('.module "m"; .input 2; .hidden 3relu; .output 2softmax;', lambda m: m.sizes == [2, 3, 2]),
    ('.module "m"; .precisionfixed[8,8]; .costfncquadratic; ' + REST,
     lambda m: (m.precision, m.cost) == ("fixed8.8", "quadratic")),
])
def test_keywords_are_fixed_strings_that_need_no_separator(text, check):
    assert check(g(text))


@pytest.mark.parametrize("text, words, where", [
    ('.module "m"; .speed 4;', ["unknown directive '.speed'"], "1:14"),
    ('.module "m"; .Module "n";', ["unknown directive '.Module'"], "1:14"),
    ('.module "m"; .costfnc hinge; ' + REST, ["cost function", "'hinge'"], "1:23"),
    ('.module "m"; .input 2; .hidden 3 relux; .output 2 softmax;', ["expected ';'", "'x'"], "1:38"),
    ('.module "m"; .optimizer SGD 0.5; ' + REST, ["an optimizer", "'SGD'"], "1:25"),
])
def test_other_words_are_refused_naming_them(text, words, where):
    refused(text, *words, where=where)


@pytest.mark.parametrize("expr, value", [("7", 7), ("-7 + 9", 2), ("007", 7)])
def test_an_integer_is_digits_with_an_optional_sign(expr, value):
    assert g(f'.module "m"; .input {expr}; .hidden 3 relu; .output 2 softmax;').inputs == value


@pytest.mark.parametrize("expr, where", [("28 -1", "1:24"), ("28-1", "1:23"), ("2 3", "1:23")])
def test_the_sign_belongs_to_the_integer_token(expr, where):
    """`28-1` is the integers 28 and -1 for Gravity's lexer (longest match): a syntax error."""
    refused(f'.module "m"; .input {expr}; .hidden 3 relu; .output 2 softmax;', "expected ';'", where=where)


@pytest.mark.parametrize("real, value", [
    ("0.5", 0.5), ("1.", 1.0), (".5", 0.5),                 # -?[0-9]+"."[0-9]*  and  -?"."[0-9]+
    ("1E-1", 0.1), ("5E-1", 0.5), ("1E0", 1.0), ("1E+0", 1.0),   # -?[0-9]+E[-+]?[0-9]+ (refused before)
    ("2.5E-1", 0.25), ("1.E-1", 0.1),                        # -?[0-9]+"."[0-9]*E[-+]?[0-9]+
    (".5E-1", 0.05), (".25E+0", 0.25),                      # -?"."[0-9]*E[-+]?[0-9]+
])
def test_every_real_form_of_the_lexer(real, value):
    assert g(f'.module "m"; .optimizer sgd {real}; ' + REST).learning_rate == value


@pytest.mark.parametrize("real, words", [
    (".E1", ["invalid numeric value '.E1'"]),       # a real token strtod cannot read
    ("1e-1", ["real learning rate", "'1'"]),        # lower-case e is no exponent: the integer 1, then e
    ("1", ["real learning rate"]),                  # an integer is not a real
    ("-0.5", ["(0, 1]"]), ("1.5", ["(0, 1]"]), ("0.0", ["(0, 1]"]),
])
def test_reals_gravity_refuses(real, words):
    refused(f'.module "m"; .optimizer sgd {real}; ' + REST, *words, where="1:29")


@pytest.mark.parametrize("literal, name", [("'net_1'", "net_1"), ('"m2"', "m2"), ("'m'", "m")])
def test_a_string_in_either_quotes(literal, name):
    assert g(f".module {literal}; " + REST).name == name


@pytest.mark.parametrize("literal, shown", [
    ("'n\\et'", "'n\\\\et'"),          # backslash pairs are part of the value, as in Gravity
    ('"a""b"', "'a\"\"b'"),            # so are doubled quotes
    ("'it''s'", "\"it''s\""),
])
def test_a_strings_value_is_its_text_unprocessed(literal, shown):
    refused(f".module {literal}; " + REST, f"{shown} is not a C identifier", where="1:9")


def test_a_string_is_the_longest_match_and_stops_at_a_newline():
    """`"a\\"; .prefix "` is one string for Gravity's lexer (the longest match), so what follows it
    is an error; a newline ends no string."""
    refused('.module "a\\"; .prefix "p"; ' + REST)
    refused('.module "a\\"; .prefix "; ' + REST, "'a\\\\\"; .prefix ' is not a C identifier", where="1:9")
    refused('.module "m\n"; ' + REST, "unexpected character", where="1:9")


@pytest.mark.parametrize("space", [" ", "\t", "\n", "  \n\t "])
def test_white_space_is_space_tab_and_newline(space):
    assert g(f".module{space}'m';{space}.input{space}2;{space}.hidden 3{space}relu; .output 2 softmax;").inputs == 2


def test_carriage_return_is_white_space_too_and_other_controls_are_refused():
    """A deviation, kinder than Gravity: CR (files written on Windows) is white space."""
    assert g(".module 'm';\r\n" + REST + "\r\n").name == "m"
    refused(".module 'm';\f" + REST, "unexpected character '\\x0c'", where="1:13")
    refused(".module 'm';\v" + REST, "unexpected character '\\x0b'", where="1:13")


def test_comments_run_to_the_end_of_the_line():
    text = '// a program\n.module "m"; // name\n.input 2; // .input 3;\n.hidden 3 relu; .output 2 softmax; // last'
    model = g(text)
    assert model.inputs == 2 and model.layers[0].where.endswith("t.g:4:1")   # a deviation: no final newline


@pytest.mark.parametrize("char", ["@", "#", "{", "=", "\"", "\\", "~", "\x00", "!"])
def test_any_other_character_is_refused(char):
    refused(f'.module "m"; .input 2; {char}', where="1:24")


# ------------------------------------------------------------------------------- the grammar (g_lang.y)


@pytest.mark.parametrize("text", [
    ';.module "m";' + REST, '.module "m";;;' + REST, '.module "m"; ' + REST + ';', '; ; .module "m"; ; ' + REST + ' ;',
])
def test_a_lone_semicolon_is_an_empty_phrase(text):
    """`_phrase1_ : ... | ';'`: refused by nnbuild before."""
    assert g(text).sizes == [2, 3, 2]


@pytest.mark.parametrize("text, words, where", [
    ("", ["missing .module"], "1:1"),
    (";", ["missing .module"], "1:2"),
    ('.module "m" .input 2;', ["expected ';'", "'.input'"], "1:13"),
    ('.module "m"; .input 2; .hidden 3 relu; .output 2 softmax', ["expected ';'", "end of file"], None),
    ('.module "m"; 5;', ["expected a directive"], "1:14"),
])
def test_every_directive_ends_with_a_semicolon(text, words, where):
    refused(text, *words, where=where)


def test_module_is_required_once_and_not_empty():
    refused('.module ""; ' + REST, "'' is not a C identifier", where="1:9")
    refused('.module "m"; .module "n"; ' + REST, ".module given twice", where="1:14")
    refused(REST, "missing .module")


def test_prefix_may_be_empty_and_defaults_to_g():
    assert g('.module "m"; .prefix ""; ' + REST).prefix == ""
    assert g('.module "m"; ' + REST).prefix == "g"
    refused('.module "m"; .prefix "a"; .prefix "b"; ' + REST, ".prefix given twice")


def test_optimizer_is_sgd_and_a_real_defaulting_to_0_1():
    assert g('.module "m"; ' + REST).learning_rate == 0.1
    refused('.module "m"; .optimizer adam 0.1; ' + REST, "an optimizer", where="1:25")
    refused('.module "m"; .optimizer sgd; ' + REST, "real learning rate", where="1:28")


@pytest.mark.parametrize("spelling, precision", [
    ("float", "float32"), ("double", "float64"), ("fixed [8, 8]", "fixed8.8"), ("fixed[1,0]", "fixed1.0"),
    ("fixed [2 * 4, 16 - 8]", "fixed8.8"), ("fixed [32, 32]", "fixed32.32"),
])
def test_precision_is_float_double_or_fixed_of_two_expressions(spelling, precision):
    assert g(f'.module "m"; .precision {spelling}; ' + REST).precision == precision


@pytest.mark.parametrize("spelling, words", [
    ("fixed [0, 8]", ["w >= 1"]), ("fixed [8, -1]", ["f >= 0"]), ("fixed [33, 32]", ["w + f <= 64"]),
    ("fixed 8, 8", ["'['"]), ("fixed [8 8]", ["','"]), ("half", ["a precision"]),
])
def test_precisions_gravity_refuses(spelling, words):
    refused(f'.module "m"; .precision {spelling}; ' + REST, *words)


@pytest.mark.parametrize("cost", ["quadratic", "exponential", "cross_entropy"])
def test_costfnc_is_one_of_three_defaulting_to_cross_entropy(cost):
    assert g(f'.module "m"; .costfnc {cost}; ' + REST).cost == cost
    assert g('.module "m"; ' + REST).cost == "cross_entropy"


def test_batch_is_an_expression_up_to_1000_defaulting_to_1():
    assert g('.module "m"; .batch 10 * 100; ' + REST).batch == 1000
    assert g('.module "m"; ' + REST).batch == 1
    refused('.module "m"; .batch 1001; ' + REST, ".batch must be 1 to 1,000", where="1:21")
    refused('.module "m"; .batch 0; ' + REST, ".batch must be 1 to 1,000")   # a deviation: Gravity takes 0


@pytest.mark.parametrize("directive", ["input", "output", "hidden"])
def test_layer_sizes_are_expressions_up_to_a_million(directive):
    sizes = {"input": "2", "hidden": "3 relu", "output": "2 softmax"}
    sizes[directive] = sizes[directive].replace(sizes[directive].split()[0], "1000 * 1000")
    text = '.module "m"; ' + " ".join(f".{d} {v};" for d, v in sizes.items())
    assert 1_000_000 in g(text).sizes
    sizes[directive] = sizes[directive].replace("1000 * 1000", "1000 * 1000 + 1")
    refused('.module "m"; ' + " ".join(f".{d} {v};" for d, v in sizes.items()), "1,000,000")
    sizes[directive] = sizes[directive].replace("1000 * 1000 + 1", "0")
    refused('.module "m"; ' + " ".join(f".{d} {v};" for d, v in sizes.items()), "0")   # a deviation


def test_input_and_output_once_hidden_any_number_of_times_in_declared_order():
    model = g('.module "m"; .input 4; .hidden 9 relu; .hidden 3 sigmoid; .hidden 5 linear; .output 2 sigmoid; '
              '.costfnc quadratic;')
    assert model.sizes == [4, 9, 3, 5, 2]   # a deviation: Gravity's compiler reverses the hidden layers
    refused('.module "m"; .input 2; .input 3; .hidden 3 relu; .output 2 softmax;', ".input given twice")
    refused('.module "m"; .input 2; .hidden 3 relu; .output 2 softmax; .output 2 softmax;', ".output given twice")
    for missing in ("input", "output", "hidden"):
        text = " ".join(p + ";" for p in REST.rstrip(";").split("; ") if not p.startswith("." + missing))
        refused('.module "m"; ' + text, f"missing .{missing}")


@pytest.mark.parametrize("activation", ["relu", "linear", "softmax", "sigmoid", "tanh"])
def test_activation_is_one_of_gravitys_four_and_tanh(activation):
    model = g(f'.module "m"; .costfnc quadratic; .input 2; .hidden 3 {activation}; .output 2 {activation};')
    assert [l.activation for l in model.layers] == [activation, activation]


@pytest.mark.parametrize("expr, value", [
    ("(5)", 5), ("((2 + 3))", 5),                      # _expr_ : '(' _expr_ ')'
    ("- 3 + 10", 7), ("-(3 + 4) * -2", 14), ("- -3", 3), ("--3", 3),   # '-' _expr_ %prec N
    ("- 2 * 3 + 10", 4),                               # unary minus binds tighter than *
    ("8 - 2 - 1", 5), ("2 + 3 - 1", 4),                # + - left associative
    ("2 + 3 * 4", 14), ("(2 + 3) * 4", 20),            # * above +
    ("100 / 10 / 2", 5), ("17 % 5", 2), ("2 * 17 % 5", 4), ("17 / 5 * 5", 15),   # * / % left associative
    ("-7 / 2 + 10", 7), ("-7 % 2 + 10", 9),            # C: truncation toward zero
])
def test_integer_expressions_with_c_precedence(expr, value):
    assert g(f'.module "m"; .input {expr}; .hidden 3 relu; .output 2 softmax;').inputs == value


@pytest.mark.parametrize("expr, where", [("4 / (2 - 2)", "1:23"), ("4 % 0", "1:23")])
def test_division_by_zero_is_refused(expr, where):
    refused(f'.module "m"; .input {expr}; .hidden 3 relu; .output 2 softmax;', "division by zero", where=where)


@pytest.mark.parametrize("expr, words", [("(2", ["')'"]), ("2 +", ["integer expression"]), ("*2", ["integer expression"]),
                                         ("2.0", ["integer expression"])])
def test_malformed_expressions_are_refused(expr, words):
    refused(f'.module "m"; .input {expr}; .hidden 3 relu; .output 2 softmax;', *words)
