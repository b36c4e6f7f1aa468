"""Divergence predictors: scipy/numpy references, 0 log 0 = 0, +inf (never NaN) off-support, exact self-teacher."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special
from scipy.spatial import distance

from opd_jax.estimators import predictors

V = 50


def log(x):
  with np.errstate(divide="ignore"):
    return np.log(np.asarray(x, np.float64))


def log_softmax_np(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


def random_logprobs(seed, shape, scale=2.0):
  return log_softmax_np(np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


def with_zeros(logp, logq):
  """Zero probabilities of every kind: p = 0 < q, q = 0 < p, p = q = 0 (renormalised afterwards)."""
  logp, logq = logp.copy(), logq.copy()
  logp[..., 0:3] = -np.inf            # p = 0 < q
  logq[..., 3:5] = -np.inf            # q = 0 < p
  logp[..., 5:8] = logq[..., 5:8] = -np.inf  # both 0
  return log_softmax_np(logp).astype(np.float32), log_softmax_np(logq).astype(np.float32)


def numpy_reference(logp, logq, tokens, beta, k):
  """Independent transcription with scipy (natural log) in float64; a fork's predictor by its registered
  numpy `reference`."""
  p, q = np.exp(logp.astype(np.float64)), np.exp(logq.astype(np.float64))
  m = beta * q + (1 - beta) * p
  n = logp.shape[-1]
  flat_p, flat_q = p.reshape(-1, n), q.reshape(-1, n)
  overlap = [len(set(np.argsort(-a, kind="stable")[:k]) & set(np.argsort(-b, kind="stable")[:k])) / k
             for a, b in zip(logp.reshape(-1, n), logq.reshape(-1, n))]
  lp_y = np.take_along_axis(logp.astype(np.float64), tokens[..., None], -1)[..., 0]
  lq_y = np.take_along_axis(logq.astype(np.float64), tokens[..., None], -1)[..., 0]
  lead = p.shape[:-1]
  return {
      "kl_pq": special.rel_entr(p, q).sum(-1),
      "kl_qp": special.rel_entr(q, p).sum(-1),
      "js": np.array([distance.jensenshannon(a, b) ** 2 for a, b in zip(flat_p, flat_q)]).reshape(lead),
      "jsd_beta": beta * special.rel_entr(q, m).sum(-1) + (1 - beta) * special.rel_entr(p, m).sum(-1),
      "tv": 0.5 * np.abs(p - q).sum(-1),
      "cosine": (p * q).sum(-1) / np.linalg.norm(p, axis=-1) / np.linalg.norm(q, axis=-1),
      "entropy_p": special.entr(p).sum(-1),
      "entropy_q": special.entr(q).sum(-1),
      "topk_overlap": np.array(overlap).reshape(lead),
      "logq_minus_logp": lq_y - lp_y,
      # A fork's predictor: the numpy reference its registry entry carries (`Predictor.reference`).
      **{name: np.asarray(pred.reference(logp.astype(np.float64), logq.astype(np.float64), tokens), np.float64)
         for name, pred in predictors.REGISTRY.items() if pred.fn is not None},
  }


@pytest.mark.parametrize("beta", [0.5, 0.2])
def test_predictors_match_scipy_and_numpy(beta):
  logp, logq = random_logprobs(0, (2, 3, V)), random_logprobs(1, (2, 3, V), scale=4.0)
  logp[1], logq[1] = with_zeros(logp[1], logq[1])   # batch row 1 has zero probabilities of every kind
  tokens = np.array([[4, 9, 17], [3, 11, 40]])       # token 3 of row 1: q = 0 < p
  got = predictors.predictors(logp, logq, tokens, beta=beta, top_k=8)
  want = numpy_reference(logp, logq, tokens, beta, 8)
  assert set(got) == set(predictors.PREDICTORS) == set(want)
  for name in predictors.PREDICTORS:
    assert got[name].shape == (2, 3) and got[name].dtype == jnp.float32, name
    assert not np.any(np.isnan(got[name])), name
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-6, err_msg=name)
  # the support condition fails only in row 1: p > 0 = q for KL(p||q), q > 0 = p for KL(q||p)
  assert np.all(np.isinf(got["kl_pq"][1])) and np.all(np.isinf(got["kl_qp"][1]))
  assert np.all(np.isfinite(got["kl_pq"][0])) and np.all(np.isfinite(got["js"]))
  assert np.isneginf(got["logq_minus_logp"][1, 0])


def test_blocked_pass_over_a_vocabulary_of_several_blocks_matches_scipy():
  # predictors sums the vocabulary in blocks of PREDICTOR_BLOCK ids plus a remainder: put zeros of every kind
  # in block 1 and in the remainder, and give row 2 identical p and q.
  W = predictors.PREDICTOR_BLOCK
  big = 2 * W + 37
  logp, logq = random_logprobs(5, (3, big), scale=3.0), random_logprobs(6, (3, big), scale=3.0)
  logp[:, W + 1], logq[:, W + 2], logp[:, -3:], logq[:, -3:] = -np.inf, -np.inf, -np.inf, -np.inf
  logp[0, -5], logq[1, -6] = -np.inf, -np.inf              # row 0: q > 0 = p late; row 1: p > 0 = q late
  logp, logq = log_softmax_np(logp).astype(np.float32), log_softmax_np(logq).astype(np.float32)
  logq[2] = logp[2]
  tokens = np.array([0, big - 10, 7])
  got = predictors.predictors(logp, logq, tokens, beta=0.3, top_k=8)
  want = numpy_reference(logp, logq, tokens, 0.3, 8)
  for name in predictors.PREDICTORS:
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-6, err_msg=name)
  assert np.all(np.isinf(got["kl_pq"][:2])) and np.all(np.isinf(got["kl_qp"][:2]))   # block 1 fails both ways
  assert got["kl_pq"][2] == got["js"][2] == got["tv"][2] == 0 and got["cosine"][2] == 1


def test_individual_functions_agree_with_predictors():
  logp, logq = random_logprobs(2, (4, V)), random_logprobs(3, (4, V))
  tokens = np.array([0, 5, 7, 49])
  out = predictors.predictors(logp, logq, tokens, beta=0.3, top_k=5)
  np.testing.assert_allclose(predictors.kl(logp, logq), out["kl_pq"], rtol=1e-6)
  np.testing.assert_allclose(predictors.kl(logq, logp), out["kl_qp"], rtol=1e-6)
  np.testing.assert_allclose(predictors.jsd(logp, logq), out["js"], rtol=1e-6)
  np.testing.assert_allclose(predictors.jsd(logp, logq, 0.3), out["jsd_beta"], rtol=1e-6)
  np.testing.assert_allclose(predictors.total_variation(logp, logq), out["tv"], rtol=1e-6)
  np.testing.assert_allclose(predictors.cosine(logp, logq), out["cosine"], atol=1e-6)
  np.testing.assert_allclose(predictors.entropy(logq), out["entropy_q"], rtol=1e-6)
  np.testing.assert_array_equal(predictors.topk_overlap(logp, logq, 5), out["topk_overlap"])
  np.testing.assert_array_equal(predictors.logq_minus_logp(logp, logq, tokens), out["logq_minus_logp"])


def test_pinned_two_token_values():
  logp, logq = log([[0.5, 0.5, 0.0]]), log([[1.0, 0.0, 0.0]])
  got = predictors.predictors(logp, logq, np.array([1]), top_k=1)
  assert got["kl_pq"][0] == np.inf                                     # p > 0 where q = 0
  np.testing.assert_allclose(got["kl_qp"][0], np.log(2.0), rtol=1e-6)  # 1 * log(1 / 0.5)
  # m = (0.75, 0.25, 0): JS = 0.5 log(1/0.75) + 0.5 (0.5 log(0.5/0.75) + 0.5 log(0.5/0.25))
  js = 0.5 * np.log(1 / 0.75) + 0.25 * np.log(0.5 / 0.75) + 0.25 * np.log(2.0)
  np.testing.assert_allclose(got["js"][0], js, rtol=1e-6)
  np.testing.assert_allclose(got["tv"][0], 0.5, rtol=1e-6)
  np.testing.assert_allclose(got["cosine"][0], 0.5 / np.sqrt(0.5), rtol=1e-6)
  np.testing.assert_allclose(got["entropy_p"][0], np.log(2.0), rtol=1e-6)
  assert got["entropy_q"][0] == 0 and got["topk_overlap"][0] == 1     # token 0 tops both (lower id wins the tie)
  assert got["logq_minus_logp"][0] == -np.inf


def test_identical_inputs_give_exact_zeros():
  logp = random_logprobs(4, (2, 3, V), scale=5.0)
  logp[0], _ = with_zeros(logp[0], logp[0])
  tokens = np.array([[0, 1, 2], [3, 4, 5]])   # row 0: tokens with p = q = 0 too
  got = jax.jit(lambda a, b: predictors.predictors(a, b, tokens, beta=0.1, top_k=4))(logp, logp.copy())
  for name in ("kl_pq", "kl_qp", "js", "jsd_beta", "tv", "logq_minus_logp"):
    assert np.all(got[name] == 0) and not np.any(np.signbit(got[name])), (name, got[name])
  assert np.all(got["cosine"] == 1) and np.all(got["topk_overlap"] == 1)
  np.testing.assert_array_equal(got["entropy_p"], got["entropy_q"])
  assert np.all(got["entropy_p"] > 0)


def test_extreme_log_ratios_stay_finite_and_accurate():
  # p underflows in exp where q does not, and the reverse: log-ratios of about +-100 nats.
  logp = np.full((2, V), -110.0, np.float32)
  logq = np.full((2, V), -3.0, np.float32)
  logp[:, 0], logq[:, 1] = 0.0, 0.0
  logp, logq = log_softmax_np(logp).astype(np.float32), log_softmax_np(logq).astype(np.float32)
  got = predictors.predictors(logp, logq, np.array([0, 1]), beta=0.9, top_k=3)
  want = numpy_reference(logp, logq, np.array([0, 1]), 0.9, 3)
  for name in predictors.PREDICTORS:
    assert np.all(np.isfinite(got[name])), name
    np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_topk_overlap_ties_go_to_the_lower_token_id():
  logp = log(np.array([[0.3, 0.3, 0.3, 0.1, 0.0, 0.0],      # tie among 0, 1, 2
                          [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]]))    # fewer than k tokens with mass
  logq = log(np.array([[0.1, 0.3, 0.3, 0.3, 0.0, 0.0],      # tie among 1, 2, 3
                          [0.0, 0.0, 0.0, 0.0, 0.5, 0.5]]))
  for k in (1, 2, 3, 4):
    got = predictors.topk_overlap(logp, logq, k)
    want = [len(set(np.argsort(-a, kind="stable")[:k]) & set(np.argsort(-b, kind="stable")[:k])) / k
            for a, b in zip(logp, logq)]
    np.testing.assert_array_equal(got, np.float32(want))
  # row 0, k = 2: p -> {0, 1}, q -> {1, 2}; row 1, k = 4: p -> {0, 1, 2, 3} (-inf ties), q -> {4, 5, 0, 1}
  assert predictors.topk_overlap(logp, logq, 2)[0] == 0.5
  assert predictors.topk_overlap(logp, logq, 4)[1] == 0.5


def test_logq_minus_logp_pins():
  logp = log([[0.5, 0.5, 0.0, 0.0]])
  logq = log([[0.25, 0.0, 0.75, 0.0]])
  got = [float(predictors.logq_minus_logp(logp, logq, np.array([y]))[0]) for y in range(4)]
  np.testing.assert_allclose(got[0], np.log(0.5), rtol=1e-6)
  assert got[1:] == [-np.inf, np.inf, 0.0]   # q = 0 < p, p = 0 < q, both 0


def test_bad_inputs_raise():
  logp = random_logprobs(5, (2, V))
  with pytest.raises(ValueError, match="same shape"):
    predictors.kl(logp, logp[:, :-1])
  for beta in (0.0, 1.0, 1.5, float("nan")):
    with pytest.raises(ValueError, match="beta"):
      predictors.predictors(logp, logp, np.array([0, 1]), beta=beta)
  with pytest.raises(ValueError, match="traced"):
    jax.jit(lambda b: predictors.jsd(logp, logp, b))(0.5)
  for k in (0, V + 1, 2.0):
    with pytest.raises(ValueError, match="top_k"):
      predictors.topk_overlap(logp, logp, k)
  with pytest.raises(ValueError, match="tokens"):
    predictors.predictors(logp, logp, np.array([0]))
  with pytest.raises(ValueError, match="tokens"):
    predictors.logq_minus_logp(logp, logp, np.array([0.0, 1.0]))


TOP1_AGREE = predictors.Predictor(   # the worked example of docs/usage.md, "A predictor"
    name="top1_agree", about="1 where argmax p = argmax q",
    fn=lambda lp, lq, y: (jnp.argmax(lp, -1) == jnp.argmax(lq, -1)).astype(lp.dtype),
    reference=lambda lp, lq, y: (np.argmax(lp, -1) == np.argmax(lq, -1)).astype(np.float64))


def test_a_forks_predictor_is_compared_with_the_reference_its_entry_carries(monkeypatch):
  """Adding the docs' entry to the registry is all a fork does: the reference tests above read it (no test edit);
  an entry with `fn` and no `reference` is refused when it is made."""
  monkeypatch.setitem(predictors.REGISTRY, "top1_agree", TOP1_AGREE)
  monkeypatch.setattr(predictors, "PREDICTORS", tuple(predictors.REGISTRY))
  test_predictors_match_scipy_and_numpy(0.5)
  test_extreme_log_ratios_stay_finite_and_accurate()
  logp, logq = random_logprobs(8, (64, 6), scale=3.0), random_logprobs(9, (64, 6), scale=3.0)
  got = predictors.predictors(logp, logq, np.zeros(64, int), top_k=2)["top1_agree"]
  assert 0 < got.sum() < 64                                   # both outcomes occur
  np.testing.assert_array_equal(got, logp.argmax(-1) == logq.argmax(-1))
  with pytest.raises(ValueError, match="predictor 'mine' has fn but no reference"):
    predictors.Predictor(name="mine", about="x", fn=lambda lp, lq, y: lp[..., 0])
