"""The const-host tanh's table (storage const-host, float32; the prelude's tanh form "table").

tanh(x) = x * R(|x|) with R(a) = tanh(a) / a (R(0) = 1): even, smooth, between 0.11 and 1 on
[0, 9.0625], so a polynomial of R is a polynomial with relative accuracy, tiny x included. |x| is
cut in ROWS intervals of width 1/PER_UNIT; on interval i (12|x| in [i, i + 1)) R is a degree-4
polynomial of s = 12|x| - (i + 1/2), s in [-1/2, 1/2), with the coefficients of TABLE[i] (s^0
first). Each row is a least-squares fit of R's relative error on 48 Chebyshev nodes, in 30-digit
arithmetic (`fit`, mpmath), rounded to double: at most about 6e-10 relative, so the C's result,
evaluated in double and rounded once to float, is within 0.52 ulp of tanh over every float32
(bench/host_tanh_exhaustive.py proves it for the compiled C). 9.0625 (= 108.75 / 12) is where
tanh rounds to 1.0f: the C returns +-1 from there on (and NaN for NaN).

Why a table: on x86-64 the C is 9 instructions of Horner (multiplies and adds whose coefficient
is a memory operand) and 6 to find the row, against about 33 for the rational x P(x^2) / Q(x^2)
of degrees 5/4 it replaces (the same accuracy needs the division and two polynomials): the
difference is about 8% of LeNet-5's instructions at -O2 (4,684 tanh per inference).
"""

#: intervals per unit of |x|, and how many there are (12 * 9.0625 = 108.75: rows 0..108)
PER_UNIT = 12
ROWS = 109
DEGREE = 4
#: float.hex of the coefficients of s^0 .. s^4, one row per interval
TABLE = (
    ("0x1.ffb43366a3c18p-1", "-0x1.2efc7f174d0d7p-9", "-0x1.2e253561ccb94p-9", "0x1.ad6f6ea8c6f2ep-17", "0x1.aa8857c604f6ep-18"),
    ("0x1.fd5992bc39228p-1", "-0x1.c179bd25ac2e2p-8", "-0x1.24351499aa71cp-9", "0x1.392d93490589ap-15", "0x1.87609335ed8b6p-18"),
    ("0x1.f8b80ea125076p-1", "-0x1.6e6df001c2109p-7", "-0x1.11256b3d77c45p-9", "0x1.eda83fd398303p-15", "0x1.4661d9cf2d61ap-18"),
    ("0x1.f1f585a1876e9p-1", "-0x1.f09ca6d776cc4p-7", "-0x1.ecf029d3a5136p-10", "0x1.3e0c4d4b3ea37p-14", "0x1.e1d57f1a54e9fp-19"),
    ("0x1.e946fd36567a5p-1", "-0x1.31fab465d29bcp-6", "-0x1.ac51cff3ab567p-10", "0x1.6e878b2ddf016p-14", "0x1.249dbf97b1e99p-19"),
    ("0x1.deecb55e6abe0p-1", "-0x1.63199127b338bp-6", "-0x1.64d5828cbd720p-10", "0x1.8763bb742d67dp-14", "0x1.ac8dd75330b26p-21"),
    ("0x1.d32dcddd57de3p-1", "-0x1.8b151252a7b42p-6", "-0x1.1acc784e07a30p-10", "0x1.8a429e296181cp-14", "-0x1.c6c011d9f206ap-22"),
    ("0x1.c653fddf8e0acp-1", "-0x1.a9da905b66953p-6", "-0x1.a413773655fddp-11", "0x1.7a9c5535a40abp-14", "-0x1.77bc632d73183p-20"),
    ("0x1.b8a7c6aa9e327p-1", "-0x1.bfc619684cacfp-6", "-0x1.1b3afe367bb11p-11", "0x1.5ced33eb4ad2dp-14", "-0x1.191161586ae3ep-19"),
    ("0x1.aa6d65dccedf7p-1", "-0x1.cd87d86d32511p-6", "-0x1.3eddcd16933c2p-12", "0x1.35f037262a2fbp-14", "-0x1.512aac3f36c87p-19"),
    ("0x1.9be2a56575d12p-1", "-0x1.d407f18dca46bp-6", "-0x1.9aa5915500f25p-14", "0x1.0a066093e7062p-14", "-0x1.68c730535228cp-19"),
    ("0x1.8d3d867b003a2p-1", "-0x1.d44c62ac5f8aap-6", "0x1.3f91ce7d4a04ep-14", "0x1.b9aee5b42a15fp-15", "-0x1.6698e89375b77p-19"),
    ("0x1.7eabad93ffce6p-1", "-0x1.cf6325406cd0ep-6", "0x1.c9e650505bde4p-13", "0x1.6251854703929p-15", "-0x1.51dfe82cd5f33p-19"),
    ("0x1.705268a598a22p-1", "-0x1.c6518dc0edc0cp-6", "0x1.5a68342882239p-12", "0x1.11bb7149858dbp-15", "-0x1.31596a8a67519p-19"),
    ("0x1.624f25254749bp-1", "-0x1.ba08ebde012f7p-6", "0x1.b346648f5e2dfp-12", "0x1.944b4c267a91dp-16", "-0x1.0aa6c6ecc34a8p-19"),
    ("0x1.54b82debf60d6p-1", "-0x1.ab5fcf206bad9p-6", "0x1.f3270fb5c15e1p-12", "0x1.1915bb6a00f8fp-16", "-0x1.c42aed5cb3428p-20"),
    ("0x1.479d8f6499f92p-1", "-0x1.9b0f055cec663p-6", "0x1.0ee95be150845p-11", "0x1.63f13218bbb5ap-17", "-0x1.7551ba58e5074p-20"),
    ("0x1.3b0a082a679bcp-1", "-0x1.89b15754e9d05p-6", "0x1.1b7c30ad5e7ebp-11", "0x1.7776c0c4925fbp-18", "-0x1.2c913403e0c16p-20"),
    ("0x1.2f03f3d5659c2p-1", "-0x1.77c51d1bc56c8p-6", "0x1.20ffb6f3dd395p-11", "0x1.af528bc5627b5p-20", "-0x1.d7f4ad9e54180p-21"),
    ("0x1.238e244dc7f60p-1", "-0x1.65aeec189a80fp-6", "0x1.20f73184aa592p-11", "-0x1.8ea3937989a3dp-20", "-0x1.68b216b054d53p-21"),
    ("0x1.18a8a339ba197p-1", "-0x1.53bcce082b921p-6", "0x1.1cb07effc17eap-11", "-0x1.fffb269b07de5p-19", "-0x1.0b3ba5e3b8668p-21"),
    ("0x1.0e5158f00ec68p-1", "-0x1.42299af71bae4p-6", "0x1.154451dd687afp-11", "-0x1.71cc53d95b96bp-18", "-0x1.7cc7ca48e9500p-22"),
    ("0x1.048498f6ce048p-1", "-0x1.312033c8c25cep-6", "0x1.0b999daee0735p-11", "-0x1.c0f8d2856f4cfp-18", "-0x1.00d782d764061p-22"),
    ("0x1.f67b2b6941f1bp-2", "-0x1.20be765b1024ap-6", "0x1.006ac1adbb639p-11", "-0x1.f475b6939cd4ap-18", "-0x1.3d657da4975d9p-23"),
    ("0x1.e4ed7bbf04848p-2", "-0x1.1117d82df0906p-6", "0x1.e896d4ae07caep-12", "-0x1.091b30f9ba27dp-17", "-0x1.49846c12db8c3p-24"),
    ("0x1.d4540d24d7ec1p-2", "-0x1.0237a1dff4c9dp-6", "0x1.cf5cfdfdc5032p-12", "-0x1.0f9b7ab334c27p-17", "-0x1.82905258a2fc8p-26"),
    ("0x1.c4a249f91fe9ap-2", "-0x1.e8459c86f4076p-7", "0x1.b5d76944ac526p-12", "-0x1.0fc87bbefb475p-17", "0x1.34ccf76d3cab9p-26"),
    ("0x1.b5cb74e29013dp-2", "-0x1.cdb3294045544p-7", "0x1.9c891f352cbd9p-12", "-0x1.0b4aff34d3b05p-17", "0x1.973ac67b75d7fp-25"),
    ("0x1.a7c2eab166de7p-2", "-0x1.b4b150092d72ap-7", "0x1.83d17c72448bdp-12", "-0x1.0376075f810c3p-17", "0x1.24724ca9279e1p-24"),
    ("0x1.9a7c525c86decp-2", "-0x1.9d346c76a4f1bp-7", "0x1.6bf3957537088p-12", "-0x1.f2a912ca899c8p-18", "0x1.5fe2940c8304fp-24"),
    ("0x1.8debbecd42d77p-2", "-0x1.872d614c2cf07p-7", "0x1.551c5db984326p-12", "-0x1.db6bfb03bbe42p-18", "0x1.84a3d72a60cf1p-24"),
    ("0x1.8205c58ed39c1p-2", "-0x1.728ad0cffbd68p-7", "0x1.3f67b2ecbeffdp-12", "-0x1.c272dfaae6595p-18", "0x1.9822fd418028dp-24"),
    ("0x1.76bf8ce8a0da6p-2", "-0x1.5f3a0c53ac459p-7", "0x1.2ae47185e034dp-12", "-0x1.a8adf8f6463bfp-18", "0x1.9eb6652be17dcp-24"),
    ("0x1.6c0ed36f39575p-2", "-0x1.4d27c92d3fb96p-7", "0x1.1797b83a9bca1p-12", "-0x1.8ecf8ce7a94a5p-18", "0x1.9bcc9dc681b38p-24"),
    ("0x1.61e9f2af2ad29p-2", "-0x1.3c40a71677053p-7", "0x1.057f7d48af822p-12", "-0x1.755918fb10d2fp-18", "0x1.9216056656483p-24"),
    ("0x1.5847de3dab262p-2", "-0x1.2c7191d63a0f2p-7", "0x1.e929298a2f5bap-13", "-0x1.5ca60ebd7eee8p-18", "0x1.83a8c2679615fp-24"),
    ("0x1.4f2020335a13cp-2", "-0x1.1da806461ca26p-7", "0x1.c99885dcde1efp-13", "-0x1.44f47da89c82fp-18", "0x1.721f2aa9e810bp-24"),
    ("0x1.466ad3db38485p-2", "-0x1.0fd24137c53c0p-7", "0x1.ac32e2aed5072p-13", "-0x1.2e6c0031ec341p-18", "0x1.5eb108789ad4fp-24"),
    ("0x1.3e209f3133202p-2", "-0x1.02df5d6ff2c33p-7", "0x1.90db33ccbf29fp-13", "-0x1.1923399e6d8b9p-18", "0x1.4a48542cfffd1p-24"),
    ("0x1.363aaba66adf5p-2", "-0x1.ed7ec9b1de785p-8", "0x1.7772ee7d6b68bp-13", "-0x1.0524283d45dd3p-18", "0x1.35920579f52b0p-24"),
    ("0x1.2eb29e83eec4ap-2", "-0x1.d6c6b05a0e217p-8", "0x1.5fdb0e74d1d14p-13", "-0x1.e4df0b2c3d5e2p-19", "0x1.210b9a323c37ap-24"),
    ("0x1.2782912d980bbp-2", "-0x1.c17a5f473010cp-8", "0x1.49f4d341f493ap-13", "-0x1.c1fec943395b0p-19", "0x1.0d0de28507e03p-24"),
    ("0x1.20a50974b5d36p-2", "-0x1.ad7fad32c8ff8p-8", "0x1.35a2467862bb6p-13", "-0x1.a1926b584d811p-19", "0x1.f3ab2236471bep-25"),
    ("0x1.1a14f21c58e00p-2", "-0x1.9abe47716fd56p-8", "0x1.22c69779c8c13p-13", "-0x1.837ea05e18ae3p-19", "0x1.cf13f656df898p-25"),
    ("0x1.13cd93a667affp-2", "-0x1.891f9d9423b46p-8", "0x1.11465709e6c80p-13", "-0x1.67a4396f2a07ap-19", "0x1.ac84c65ca1501p-25"),
    ("0x1.0dca8d788a461p-2", "-0x1.788eca1ba83b4p-8", "0x1.01079aa563c58p-13", "-0x1.4de1e791e436dp-19", "0x1.8c14323f717a7p-25"),
    ("0x1.0807cf61e46b5p-2", "-0x1.68f8798deb4e1p-8", "0x1.e3e41ba575939p-14", "-0x1.361584cde7508p-19", "0x1.6dc75b1f80d36p-25"),
    ("0x1.028193860c46fp-2", "-0x1.5a4ad0e59b361p-8", "0x1.c7ddec7ec741ep-14", "-0x1.201d030593df1p-19", "0x1.5196d24041dc8p-25"),
    ("0x1.fa68b15cb0b2ep-3", "-0x1.4c7554101ea3ep-8", "0x1.add25cc1c5715p-14", "-0x1.0bd71572222cfp-19", "0x1.377260adb003cp-25"),
    ("0x1.f039ba0078893p-3", "-0x1.3f68ccf9e012ap-8", "0x1.959a32e60b624p-14", "-0x1.f2474a4f2457dp-20", "0x1.1f43e75c2878ep-25"),
    ("0x1.e670322b7ee7fp-3", "-0x1.33173380f5ab0p-8", "0x1.7f1125fc65bebp-14", "-0x1.cfc83ae8b2c04p-20", "0x1.08f18a8707e81p-25"),
    ("0x1.dd0676e7efd7fp-3", "-0x1.27739687eee14p-8", "0x1.6a15b7111496ep-14", "-0x1.aff7343736353p-20", "0x1.e8bea109d8bdfp-26"),
    ("0x1.d3f748b5780acp-3", "-0x1.1c72064bd7e91p-8", "0x1.568907556c404p-14", "-0x1.929dfe56c889fp-20", "0x1.c2e0a79bf029dp-26"),
    ("0x1.cb3dc3d0aa28dp-3", "-0x1.1207800fa143ap-8", "0x1.444eacde9b678p-14", "-0x1.778a00d9631e8p-20", "0x1.a00f425370026p-26"),
    ("0x1.c2d559179c9cbp-3", "-0x1.0829db22bb0d5p-8", "0x1.334c8748ff41cp-14", "-0x1.5e8c3a10a6369p-20", "0x1.8011ab2bfb4e3p-26"),
    ("0x1.bab9c780eda34p-3", "-0x1.fd9f6e7f9a99dp-9", "0x1.236a952e8b52ep-14", "-0x1.477925cc2d546p-20", "0x1.62b1166378484p-26"),
    ("0x1.b2e7161a8ea37p-3", "-0x1.ebe0d8746e83fp-9", "0x1.1492cb14f0f88p-14", "-0x1.322898e5e19a2p-20", "0x1.47b9422c91b8ep-26"),
    ("0x1.ab598e861498dp-3", "-0x1.db07f5d988d3dp-9", "0x1.06b0ec404d966p-14", "-0x1.1e7595a495de4p-20", "0x1.2ef8cec007ffdp-26"),
    ("0x1.a40db7e8c39d4p-3", "-0x1.cb05feb29f60bp-9", "0x1.f364cb5a653b2p-15", "-0x1.0c3e1bf7cf220p-20", "0x1.18416d1fca315p-26"),
    ("0x1.9d00524614d0cp-3", "-0x1.bbcd47cef32c9p-9", "0x1.db0c56ab6419cp-15", "-0x1.f6c5ef8b50763p-21", "0x1.0367ef96fdf1ap-26"),
    ("0x1.962e523c08246p-3", "-0x1.ad512b5fb1ed6p-9", "0x1.c4392f9c87c2cp-15", "-0x1.d78f1dd0ba619p-21", "0x1.e08888e2440ddp-27"),
    ("0x1.8f94dd19292dbp-3", "-0x1.9f85f381d9d79p-9", "0x1.aece9c6dccaeep-15", "-0x1.baa360041861ap-21", "0x1.bd62c2c36d4c3p-27"),
    ("0x1.89314544c2f88p-3", "-0x1.9260c696c8c56p-9", "0x1.9ab23ce2932d2p-15", "-0x1.9fd2c5e53361fp-21", "0x1.9d1a490d3a4cfp-27"),
    ("0x1.830106f24fe6ap-3", "-0x1.85d79547d5f6fp-9", "0x1.87cbd709f5468p-15", "-0x1.86f176ee28d1dp-21", "0x1.7f705d72b479ap-27"),
    ("0x1.7d01c519be110p-3", "-0x1.79e10a12f22f4p-9", "0x1.7605282adf4f6p-15", "-0x1.6fd75c8d0130fp-21", "0x1.642b73e6a9526p-27"),
    ("0x1.773146aea5084p-3", "-0x1.6e747a40260f5p-9", "0x1.6549b995b7d7fp-15", "-0x1.5a5fd1b36e314p-21", "0x1.4b16db9fbebd2p-27"),
    ("0x1.718d7411067aep-3", "-0x1.6389d821c5769p-9", "0x1.5586b91a81184p-15", "-0x1.466957dff5a15p-21", "0x1.34026750c6a8ep-27"),
    ("0x1.6c1454b2a7d5ap-3", "-0x1.5919a6833b314p-9", "0x1.46aad4e1b983ep-15", "-0x1.33d5519b5ec70p-21", "0x1.1ec216b3d31e6p-27"),
    ("0x1.66c40cec7f4e8p-3", "-0x1.4f1ced2c5b20ep-9", "0x1.38a61a67366ebp-15", "-0x1.2287c248ba53bp-21", "0x1.0b2dc2e06a5b0p-27"),
    ("0x1.619adc00130d0p-3", "-0x1.458d2e6127846p-9", "0x1.2b69d8584564bp-15", "-0x1.12671312f1892p-21", "0x1.f2419ccf0b251p-28"),
    ("0x1.5c971a4105950p-3", "-0x1.3c645d47e0ca7p-9", "0x1.1ee88319303a9p-15", "-0x1.035bdcb634360p-21", "0x1.d0f3b3a34b86dp-28"),
    ("0x1.57b737635f8cfp-3", "-0x1.339cd52109989p-9", "0x1.13159bb985cb0p-15", "-0x1.eaa16bb849260p-22", "0x1.b234f9aa473c3p-28"),
    ("0x1.52f9b8eb74dbcp-3", "-0x1.2b31513ebfa52p-9", "0x1.07e5992210d92p-15", "-0x1.d0640b7bdcc60p-22", "0x1.95ce08cec5540p-28"),
    ("0x1.4e5d38bc8a58fp-3", "-0x1.231ce5aa64307p-9", "0x1.fa9ba69611b74p-16", "-0x1.b7dbb57d0af47p-22", "0x1.7b8c6b4ccb490p-28"),
    ("0x1.49e063c3a25abp-3", "-0x1.1b5af8690c02ep-9", "0x1.e688e09952d7ap-16", "-0x1.a0e789609be3dp-22", "0x1.63422afc11e7fp-28"),
    ("0x1.4581f8bc11c43p-3", "-0x1.13e73b508f2a7p-9", "0x1.d380a63fd1edbp-16", "-0x1.8b6964f7a9295p-22", "0x1.4cc569b47d219p-28"),
    ("0x1.4140c70bb5445p-3", "-0x1.0cbda660552f0p-9", "0x1.c17217d0e1070p-16", "-0x1.7745a5c11907cp-22", "0x1.37f002580498dp-28"),
    ("0x1.3d1badb4cfa2cp-3", "-0x1.05da729224504p-9", "0x1.b04d934868407p-16", "-0x1.6462f018d118dp-22", "0x1.249f31ff9244bp-28"),
    ("0x1.39119a5bc6ba3p-3", "-0x1.fe742a3096190p-10", "0x1.a0049a4031159p-16", "-0x1.52a9fb96b481dp-22", "0x1.12b348c16386fp-28"),
    ("0x1.3521885f1d627p-3", "-0x1.f1b275fee8889p-10", "0x1.9089ba27d86f6p-16", "-0x1.420564282e1f7p-22", "0x1.020f61858eb6cp-28"),
    ("0x1.314a80002d83fp-3", "-0x1.e5698a56b2c52p-10", "0x1.81d076953e8e7p-16", "-0x1.32617f77b3701p-22", "0x1.e53240be05b5cp-29"),
    ("0x1.2d8b959b47184p-3", "-0x1.d993894ca95b7p-10", "0x1.73cd357c2f9cap-16", "-0x1.23ac363e28bbdp-22", "0x1.c870edc7206b7p-29"),
    ("0x1.29e3e8edf756dp-3", "-0x1.ce2aee7923b21p-10", "0x1.66752d207f618p-16", "-0x1.15d4e12238b3bp-22", "0x1.adaedc06e2fbep-29"),
    ("0x1.2652a46a56f9ep-3", "-0x1.c32a88b88b4b1p-10", "0x1.59be5399f2a9ap-16", "-0x1.08cc28d173b04p-22", "0x1.94c3e9cf8e403p-29"),
    ("0x1.22d6fc9657a91p-3", "-0x1.b88d7469e09ddp-10", "0x1.4d9f4fc516a17p-16", "-0x1.f907d20caf7ffp-23", "0x1.7d8b68ce10f4bp-29"),
    ("0x1.1f702f761f69cp-3", "-0x1.ae4f16207602ep-10", "0x1.420f6b7f97585p-16", "-0x1.e1de2c6a684c2p-23", "0x1.67e3cd4c8619cp-29"),
    ("0x1.1c1d840095b30p-3", "-0x1.a46b15beffeb9p-10", "0x1.37068711c8b44p-16", "-0x1.cc034b405d826p-23", "0x1.53ae650bab40cp-29"),
    ("0x1.18de499d58992p-3", "-0x1.9add59f3006cdp-10", "0x1.2c7d0da9ee330p-16", "-0x1.b760ef3112d88p-23", "0x1.40cf1500010fep-29"),
    ("0x1.15b1d7ab61a35p-3", "-0x1.91a2040865448p-10", "0x1.226bead063a4fp-16", "-0x1.a3e2877148fd2p-23", "0x1.2f2c1d4e0b2aap-29"),
    ("0x1.12978d0fb170fp-3", "-0x1.88b56c0dece2fp-10", "0x1.18cc80be21248p-16", "-0x1.91750dce4ec6ep-23", "0x1.1eade2ef2be3cp-29"),
    ("0x1.0f8ecfcb677aep-3", "-0x1.80141d4392911p-10", "0x1.0f989f81342a1p-16", "-0x1.8006e5f06e391p-23", "0x1.0f3ebe75cb515p-29"),
    ("0x1.0c970c98b81fep-3", "-0x1.77bad2ccdd2a7p-10", "0x1.06ca7cdcb3b61p-16", "-0x1.6f87bf8b767c4p-23", "0x1.00cacf73cc147p-29"),
    ("0x1.09afb68e3ee5ap-3", "-0x1.6fa674a1789f2p-10", "0x1.fcb959a6e5781p-17", "-0x1.5fe87b36d7537p-23", "0x1.e67fa8237cfc4p-30"),
    ("0x1.06d846c835845p-3", "-0x1.67d414b701f3ap-10", "0x1.ec94359c8d20cp-17", "-0x1.511b11ad862bcp-23", "0x1.cd1a08df9e39bp-30"),
    ("0x1.04103c17220f9p-3", "-0x1.6040ec5f60fefp-10", "0x1.dd1c06a046109p-17", "-0x1.43127d3c06983p-23", "0x1.b545e2e63d8c1p-30"),
    ("0x1.01571ab3976e0p-3", "-0x1.58ea59d773df2p-10", "0x1.ce47dc572dc85p-17", "-0x1.35c2a5287d422p-23", "0x1.9ee6cd56230f7p-30"),
    ("0x1.fd58d7ed56ce8p-4", "-0x1.51cdde022f0e5p-10", "0x1.c00f525cb8aaep-17", "-0x1.29204ae5b9daep-23", "0x1.89e29e0475fecp-30"),
    ("0x1.f81f7c2d99ea2p-4", "-0x1.4ae91a4cab208p-10", "0x1.b26a86717c048p-17", "-0x1.1d20f8e6ae65cp-23", "0x1.762137ebdbc57p-30"),
    ("0x1.f30147d158806p-4", "-0x1.4439ceb7e7541p-10", "0x1.a5520f6f072ebp-17", "-0x1.11baf2ebe3818p-23", "0x1.638c5e2c4e174p-30"),
    ("0x1.edfd6947d7bb0p-4", "-0x1.3dbdd8054f084p-10", "0x1.98bef4efe88f5p-17", "-0x1.06e527a82c861p-23", "0x1.520f8b2b3e27bp-30"),
    ("0x1.e9131756b101ap-4", "-0x1.37732e0350980p-10", "0x1.8caaa79c879ffp-17", "-0x1.f92e473a69f0ap-24", "0x1.4197cb6e9a7d0p-30"),
    ("0x1.e44190b0d305ep-4", "-0x1.3157e1f78e94bp-10", "0x1.810efa0ee386dp-17", "-0x1.e5920a2707975p-24", "0x1.32139bd73eb70p-30"),
    ("0x1.df881b93a2a1bp-4", "-0x1.2b6a1d2469902p-10", "0x1.75e61a4089d56p-17", "-0x1.d2e6e22890638p-24", "0x1.2372cae8504d9p-30"),
    ("0x1.dae60569d256bp-4", "-0x1.25a81f67d0fffp-10", "0x1.6b2a8b773e13ap-17", "-0x1.c11f129b6d6c6p-24", "0x1.15a65cd126bb6p-30"),
    ("0x1.d65aa2738f2c8p-4", "-0x1.20103df175c75p-10", "0x1.60d720a5d3e95p-17", "-0x1.b02dc599e57a9p-24", "0x1.08a071f6ad3c5p-30"),
    ("0x1.d1e54d73a8edbp-4", "-0x1.1aa0e20ea1055p-10", "0x1.56e6f737adb34p-17", "-0x1.a006faf4fc8e0p-24", "0x1.f8a85f7f867e0p-31"),
    ("0x1.cd85676162707p-4", "-0x1.1558880a16455p-10", "0x1.4d55723e2a9f0p-17", "-0x1.909f788feb227p-24", "0x1.e16b56dc20c45p-31"),
    ("0x1.c93a571e9cb6cp-4", "-0x1.1035be1e89713p-10", "0x1.441e35f814375p-17", "-0x1.81ecbbfef5a92p-24", "0x1.cb73ada432dd4p-31"),
    ("0x1.c503893215540p-4", "-0x1.0b37237a4f3b9p-10", "0x1.3b3d23abcda89p-17", "-0x1.73e4ed4d58bc1p-24", "0x1.b6acdd5c67c23p-31"),
)


def columns():
    """The C table's columns: the interval centres (i + 0.5, exact in decimal), then the
    coefficients of s^0 .. s^DEGREE in hexadecimal (exact), each a list of C double literals."""
    centres = [f"{i + 0.5:.1f}" for i in range(ROWS)]
    return [centres] + [[row[k] for row in TABLE] for k in range(DEGREE + 1)]


def fit(digits=30, nodes=48):
    """The TABLE, recomputed (needs mpmath; a few seconds): python3 -m nnbuild.codegen.host_tanh"""
    import mpmath as mp
    mp.mp.dps = digits

    def r(a):
        return mp.mpf(1) if a == 0 else mp.tanh(a) / a
    table = []
    for i in range(ROWS):
        ss = [mp.mpf(0.5) * mp.cos(mp.pi * (k + 0.5) / nodes) for k in range(nodes)]
        a = mp.matrix(nodes, DEGREE + 1)
        b = mp.matrix(nodes, 1)
        for n, s in enumerate(ss):
            value = r((i + mp.mpf(0.5) + s) / PER_UNIT)
            for k in range(DEGREE + 1):
                a[n, k] = s ** k / value
            b[n] = 1
        c = mp.lu_solve(a.T * a, a.T * b)
        table.append(tuple(float(c[k]).hex() for k in range(DEGREE + 1)))
    return tuple(table)


if __name__ == "__main__":
    for row in fit():
        print("    (" + ", ".join(f'"{c}"' for c in row) + "),")
