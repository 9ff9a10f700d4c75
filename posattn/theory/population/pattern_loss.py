r"""The expected loss of one pattern of the multiset path from its 12 summed per-set terms, and its
gradient in closed form (`posattn.theory.population.multiset`).

A pattern (the signal set and a multiset of the other sets' count types, at total s) enters the risk
through 12 sums over its sets of per-set terms (`multiset.per_set_terms`):

    S0 = sum sigma, S1 = sum sigma', S11 = sum sigma'^2, S2 = sum sigma'', S22 = sum sigma''^2,
    S3 = sum sigma''', S4 = sum sigma'''', V1 = sum_l (S1_l)^2, V2 = sum_l (S2_l)^2,
    W1 = sum sigma'' h^2, W2 = sum sigma'' h, W3 = sum sigma''' h,   h_i = q1 sigma'_i + q2 S1_l(i),

from which the contractions of `posattn.theory.population.heat` follow, with Q = M M^T = q1 I + q2 B
+ q3 J (Qd, Qw, Qa its diagonal, within-set and across-set entries):

    P  = q1 S11 + q2 V1 + q3 S1^2,            R  = Qd S2,
    A1 = W1 + 2 q3 S1 W2 + q3^2 S1^2 S2,      A2 = Qd (W3 + q3 S1 S3),
    A3 = (Qd^2 - Qw^2) S22 + (Qw^2 - Qa^2) V2 + Qa^2 S2^2,   A4 = Qd^2 S4,

and E = phi + (t/2) (phi'' P + phi' R) + (t^2/8) Lap^2 at F = S0 (heat.py's module docstring). The
gradient of E in the 12 sums, in (q1, q2, q3) and in t is written out by hand
(`expected_loss_and_grad`): the chunked pass computes it for every pattern with the loss, and autodiff
of this elementwise chain cost about twice the operations and split into a dozen XLA fusions.
"""

from posattn.theory.population import heat

N_TERMS = 12  # S0, S1, S11, S2, S22, S3, S4, V1, V2, W1, W2, W3


def _contractions(sums, qs):
    """(Qd, Qw, Qa), (c1, c2, c3) = the coefficients of A3, and P, R, A1, A2 / Qd, A2, A3, A4."""
    q1, q2, q3 = qs
    S0, S1, S11, S2, S22, S3, S4, V1, V2, W1, W2, W3 = sums
    Qd, Qw, Qa = q1 + q2 + q3, q2 + q3, q3
    c = (Qd * Qd - Qw * Qw, Qw * Qw - Qa * Qa, Qa * Qa)
    S1S1 = S1 * S1
    P = q1 * S11 + q2 * V1 + q3 * S1S1
    R = Qd * S2
    A1 = W1 + 2 * q3 * S1 * W2 + c[2] * S1S1 * S2
    A2_over_Qd = W3 + q3 * S1 * S3
    A3 = c[0] * S22 + c[1] * V2 + c[2] * S2 * S2
    A4 = Qd * Qd * S4
    return (Qd, Qw, Qa), c, (P, R, A1, A2_over_Qd, Qd * A2_over_Qd, A3, A4)


def expected_loss(sums, qs, t):
    """E_g of the loss of each pattern (to second order in t) from its 12 summed terms `sums` (a
    sequence of 12 arrays of one shape) and Q's coefficients qs = (q1, q2, q3)."""
    _, _, (P, R, A1, _, A2, A3, A4) = _contractions(sums, qs)
    return heat.expected_loss(sums[0], P, R, A1, A2, A3, A4, t)


def expected_loss_and_grad(sums, qs, t):
    """(E, dE/dsums (12 arrays), dE/dqs (3 arrays), dE/dt) for every pattern: `expected_loss` and its
    derivatives, the chain rule through the contractions above written out."""
    q1, q2, q3 = qs
    S0, S1, S11, S2, S22, S3, S4, V1, V2, W1, W2, W3 = sums
    (Qd, Qw, Qa), (c1, c2, c3), (P, R, A1, A2i, A2, A3, A4) = _contractions(sums, qs)
    phi, f1, f2, f3, f4, f5 = heat.loss_derivatives(S0, order=5)
    a = t / 2
    a2 = a * a
    h = a2 / 2  # t^2 / 8
    lin = f2 * P + f1 * R
    RR = R * R + 4 * A2 + 2 * A3
    lap2 = f4 * P * P + 2 * f3 * P * R + 4 * f3 * A1 + f2 * RR + f1 * A4
    E = phi + a * lin + h * lap2
    # dE/d(F, P, R, A1, A2, A3, A4): F enters through phi and its derivatives, one order up.
    gF = (
        f1
        + a * (f3 * P + f2 * R)
        + h * (f5 * P * P + 2 * f4 * P * R + 4 * f4 * A1 + f3 * RR + f2 * A4)
    )
    gP = a * f2 + a2 * (f4 * P + f3 * R)
    gR = a * f1 + a2 * (f3 * P + f2 * R)
    gA1, gA2, gA3, gA4 = 2 * a2 * f3, 2 * a2 * f2, a2 * f2, h * f1
    d_sums = (
        gF,
        2 * q3 * (gP * S1 + gA1 * (W2 + q3 * S1 * S2)) + gA2 * Qd * q3 * S3,
        q1 * gP,
        Qd * gR + c3 * (gA1 * S1 * S1 + 2 * gA3 * S2),
        c1 * gA3,
        Qd * q3 * gA2 * S1,
        Qd * Qd * gA4,
        q2 * gP,
        c2 * gA3,
        gA1,
        2 * q3 * gA1 * S1,
        Qd * gA2,
    )
    # Through Qd = q1 + q2 + q3, Qw = q2 + q3, Qa = q3 and the explicit q's.
    g_Qd = S2 * gR + A2i * gA2 + 2 * Qd * (S22 * gA3 + S4 * gA4)
    g_Qw = 2 * Qw * (V2 - S22) * gA3
    g_Qa = 2 * Qa * (S2 * S2 - V2) * gA3
    d_qs = (
        S11 * gP + g_Qd,
        V1 * gP + g_Qd + g_Qw,
        S1 * S1 * gP + 2 * S1 * (W2 + q3 * S1 * S2) * gA1 + Qd * S1 * S3 * gA2 + g_Qd + g_Qw + g_Qa,
    )
    d_t = (lin + a * lap2) / 2
    return E, d_sums, d_qs, d_t
