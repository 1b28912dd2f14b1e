"""Active-o3: GRPO's pieces against direct computations, the box format, IoU/coverage, rewards."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.papers.active_o3 import experiment as ex
from minirepro.papers.active_o3.boxes import (
    BoxFormatError,
    box_iou,
    coverage,
    grid_actions,
    parse_boxes,
    tiling,
    to_json,
)
from minirepro.papers.active_o3.canvas import global_view, make_canvases
from minirepro.papers.active_o3.grpo import (
    clipped_surrogate,
    greedy,
    group_advantages,
    grpo_loss,
    kl_k3,
    sample_without_replacement,
    sequence_logprobs,
)
from minirepro.papers.active_o3.rewards import (
    RewardTable,
    RewardWeights,
    format_reward,
    heuristic_reward,
    task_reward,
)
from minirepro.papers.active_o3.taskmodel import crop_resize

# --- GRPO -------------------------------------------------------------------------------


def test_group_advantages_match_a_direct_computation_on_hand_made_groups():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0], [0.5] * 8, [0, 0, 0, 0, 0, 0, 0, 3.0]])
    adv, zero = group_advantages(r, eps=0.0 + 1e-6)
    for i, row in enumerate(r.tolist()):
        m = sum(row) / 8
        s = math.sqrt(sum((x - m) ** 2 for x in row) / 7)
        want = [0.0] * 8 if s == 0 else [(x - m) / (s + 1e-6) for x in row]
        assert adv[i].tolist() == pytest.approx(want, abs=1e-6)
    assert zero.tolist() == [False, True, False]
    assert adv[0].sum().item() == pytest.approx(0.0, abs=1e-6)


def test_clipped_objective_matches_a_scalar_loop():
    g = torch.Generator().manual_seed(0)
    old = torch.log(torch.rand(8, 3, generator=g))
    new = old + torch.randn(8, 3, generator=g) * 0.5  # ratios far inside and outside [0.8, 1.2]
    adv = torch.tensor([1.5, -1.0, 0.3, -0.2, 0.0, 2.0, -2.0, 0.7])
    got = clipped_surrogate(new, old, adv, clip=0.2)
    for n in range(8):
        for t in range(3):
            w = math.exp(new[n, t] - old[n, t])
            a = adv[n].item()
            want = min(w * a, min(max(w, 0.8), 1.2) * a)
            assert got[n, t].item() == pytest.approx(want, rel=1e-5)


def test_grpo_loss_is_the_negated_mean_of_surrogate_minus_beta_kl():
    g = torch.Generator().manual_seed(1)
    old, ref = torch.randn(16, 3, generator=g) - 3, torch.randn(16, 3, generator=g) - 3
    new = old + 0.1 * torch.randn(16, 3, generator=g)
    adv = torch.randn(16, generator=g)
    loss, info = grpo_loss(new, old, ref, adv, clip=0.2, beta=0.05)
    total = 0.0
    for n in range(16):
        per = [clipped_surrogate(new[n:n + 1], old[n:n + 1], adv[n:n + 1])[0, t].item()
               - 0.05 * (math.exp(ref[n, t] - new[n, t]) - (ref[n, t] - new[n, t]).item() - 1) for t in range(3)]
        total += sum(per) / 3
    assert loss.item() == pytest.approx(-total / 16, rel=1e-5)
    assert 0 <= info["clipped"] <= 1


def test_kl_k3_sign_value_and_expectation_equal_the_exact_kl():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.2, 0.6])
    k3 = kl_k3(p.log(), q.log())
    assert (k3 >= 0).all()
    assert kl_k3(p.log(), p.log()).abs().max().item() == 0.0
    exact = float((p * (p / q).log()).sum())  # KL(pi_theta || pi_ref), by enumeration
    assert float((p * k3).sum()) == pytest.approx(exact, rel=1e-6)
    # the penalty's gradient moves pi_theta towards the reference
    logits = torch.tensor([1.0, 0.0, -1.0], requires_grad=True)
    lp = torch.log_softmax(logits, 0)
    (p.detach() * kl_k3(lp, q.log())).sum().backward()  # the on-policy expectation (p fixed as sampler)
    assert logits.grad[2] < 0 and logits.grad[0] > 0  # raise the unlikely action q favours


def test_sequence_logprobs_define_a_distribution_over_ordered_k_tuples():
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.0, 0.5]])
    tuples = list(itertools.permutations(range(5), 3))
    acts = torch.tensor(tuples)
    lp = sequence_logprobs(logits.expand(len(tuples), 5), acts).sum(1)
    assert lp.exp().sum().item() == pytest.approx(1.0, abs=1e-6)
    p = torch.softmax(logits[0], 0)
    a, b, c = tuples[7]
    want = p[a] * p[b] / (1 - p[a]) * p[c] / (1 - p[a] - p[b])
    assert lp[7].exp().item() == pytest.approx(want.item(), rel=1e-5)


def test_sampler_logprobs_agree_with_sequence_logprobs_and_actions_are_distinct():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 20, generator=g)
    acts, lp = sample_without_replacement(logits, 3, g)
    assert all(len(set(r)) == 3 for r in acts.tolist())
    assert torch.allclose(lp, sequence_logprobs(logits, acts), atol=1e-6)
    assert greedy(logits, 3).tolist() == logits.argsort(1, descending=True)[:, :3].tolist()


def test_grpo_bad_input_raises():
    with pytest.raises(ValueError, match="G >= 2"):
        group_advantages(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="non-finite"):
        group_advantages(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="at least 1"):
        sample_without_replacement(torch.zeros(2, 5), 0)
    with pytest.raises(ValueError, match="at least 1"):
        greedy(torch.zeros(2, 5), 0)
    with pytest.raises(ValueError, match="clip"):
        clipped_surrogate(torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2), clip=0)


# --- the answer format ------------------------------------------------------------------


def test_parse_boxes_round_trips_the_json_format():
    boxes = np.array([[0, 0, 24, 24], [50, 10, 90, 50]])
    text = to_json(boxes)
    assert json.loads(text)[0] == {"bbox_2d": [0, 0, 24, 24], "label": "digit"}
    assert parse_boxes(text).tolist() == boxes.tolist()
    assert parse_boxes(f"<answer>{text}</answer>").tolist() == boxes.tolist()


@pytest.mark.parametrize("text, why", [
    ("", "not valid JSON"),
    ("[{'bbox_2d': [0, 0, 5, 5], 'label': 'a'}]", "not valid JSON"),
    ('{"bbox_2d": [0, 0, 5, 5], "label": "a"}', "JSON list"),
    ("[]", "1..3 boxes"),
    ('[' + ','.join(['{"bbox_2d": [0, 0, 5, 5], "label": "a"}'] * 4) + ']', "1..3 boxes"),
    ('[{"bbox_2d": [0, 0, 5, 5]}]', "exactly the keys"),
    ('[{"bbox_2d": [0, 0, 5, 5], "label": "a", "score": 1}]', "exactly the keys"),
    ('[{"bbox_2d": [0, 0, 5.5, 5], "label": "a"}]', "4 integers"),
    ('[{"bbox_2d": [0, 0, 5], "label": "a"}]', "4 integers"),
    ('[{"bbox_2d": [0, 0, true, 5], "label": "a"}]', "4 integers"),
    ('[{"bbox_2d": [0, 0, NaN, 5], "label": "a"}]', "not a coordinate"),
    ('[{"bbox_2d": [5, 0, 5, 9], "label": "a"}]', "empty or reversed"),
    ('[{"bbox_2d": [-1, 0, 5, 9], "label": "a"}]', "outside"),
    ('[{"bbox_2d": [90, 0, 97, 9], "label": "a"}]', "outside"),
    ('[{"bbox_2d": [0, 0, 5, 9], "label": 3}]', "label must be a string"),
    ('<answer>[{"bbox_2d": [0, 0, 5, 9], "label": "a"}]', "unclosed"),
])
def test_malformed_answers_are_rejected_clearly(text, why):
    with pytest.raises(BoxFormatError, match=why):
        parse_boxes(text)
    assert format_reward(text) == 0.0


# --- IoU, coverage and crops against brute force (torchvision.ops does not install with this torch) --


def _mask(b, size=40):
    m = np.zeros((size, size), dtype=bool)
    m[b[1]:b[3], b[0]:b[2]] = True
    return m


box_st = st.tuples(st.integers(0, 38), st.integers(0, 38), st.integers(1, 20), st.integers(1, 20)).map(
    lambda t: (t[0], t[1], min(t[0] + t[2], 40), min(t[1] + t[3], 40)))


@settings(max_examples=60, deadline=None)
@given(st.lists(box_st, min_size=1, max_size=4), st.lists(box_st, min_size=1, max_size=4))
def test_iou_and_coverage_equal_pixel_counting(a, b):
    iou, cov = box_iou(np.array(a), np.array(b)), coverage(np.array(a), np.array(b))
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            mx, my = _mask(x), _mask(y)
            assert iou[i, j].item() == pytest.approx((mx & my).sum() / (mx | my).sum())
            assert cov[i, j].item() == pytest.approx((mx & my).sum() / mx.sum())


def test_crop_resize_equals_block_averaging_when_the_scale_is_an_integer():
    img = torch.rand(2, 96, 96, dtype=torch.float64)
    box = torch.tensor([[8, 16, 56, 64]])  # 48 px -> 24 px: every output pixel samples a 2x2 block centre
    got = crop_resize(img, torch.tensor([1]), box, out=24)[0]
    want = img[1, 16:64, 8:56].reshape(24, 2, 24, 2).mean((1, 3))
    assert torch.allclose(got, want, atol=1e-12)
    same = crop_resize(img, torch.tensor([0]), torch.tensor([[10, 20, 34, 44]]), out=24)[0]
    assert torch.allclose(same, img[0, 20:44, 10:34], atol=1e-12)


def test_boxes_outside_the_canvas_and_k_zero_raise_clearly():
    img = torch.rand(1, 96, 96)
    with pytest.raises(ValueError, match="outside"):
        crop_resize(img, torch.tensor([0]), torch.tensor([[90, 0, 100, 10]]))
    with pytest.raises(ValueError, match="x1 < x2"):
        box_iou(np.array([[5, 5, 5, 9]]), np.array([[0, 0, 3, 3]]))
    with pytest.raises(ValueError, match="at least one box"):
        heuristic_reward(np.zeros((0, 4)), np.array([[0, 0, 12, 12]]))
    with pytest.raises(ValueError, match="at least 1"):
        ex.policy_boxes(ex.SensingPolicy(), torch.zeros(1, 24, 24), 0)
    with pytest.raises(ValueError, match="24, 24"):
        ex.SensingPolicy()(torch.zeros(1, 96, 96))
    with pytest.raises(ValueError, match="cannot tile"):
        tiling(96, 5)


# --- the dual-form reward on hand-made cases ------------------------------------------------


GT = np.array([[10, 10, 22, 22], [60, 60, 72, 72]])
LABELS = np.array([3, 7])


def test_heuristic_reward_on_hand_made_cases():
    tight = np.array([[8, 8, 24, 24], [58, 58, 74, 74]])
    assert heuristic_reward(tight, GT) == pytest.approx(1.0)  # both covered, no overlap, areas fine
    assert heuristic_reward(tight[:1], GT) == pytest.approx(0.5)  # one of two digits
    huge = np.array([[0, 0, 80, 80]])  # covers both but 69% of the canvas: area penalty 0.5
    assert heuristic_reward(huge, GT) == pytest.approx(1.0 - 0.5)
    dup = np.array([[8, 8, 24, 24], [9, 9, 25, 25]])  # IoU > 0.3: the pair is penalised
    assert heuristic_reward(dup, GT) == pytest.approx(0.5 - 0.5)
    half = np.array([[16, 10, 40, 34]])  # covers the first digit's right half
    assert heuristic_reward(half, GT) == pytest.approx(0.25)


def test_task_reward_needs_coverage_and_a_correct_reading():
    boxes = np.array([[8, 8, 24, 24], [58, 58, 74, 74], [30, 30, 50, 50]])
    assert task_reward(boxes, np.array([3, 7, 10]), GT, LABELS) == 1.0
    assert task_reward(boxes, np.array([3, 1, 7]), GT, LABELS) == 0.5  # '7' read on an empty crop
    far = np.array([[16, 10, 40, 34]])  # covers 50% of the '3'
    assert task_reward(far, np.array([3]), GT, LABELS) == 0.5
    assert task_reward(np.array([[17, 10, 40, 34]]), np.array([3]), GT, LABELS) == 0.0  # 5/12 < 50%
    w = RewardWeights()
    assert w.for_form("task") == (1.0, 0.0, 0.5) and w.for_form("heuristic") == (0.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="reward form"):
        w.for_form("both")


def test_reward_table_equals_the_direct_rewards():
    cv = make_canvases(6, 3)
    acts = grid_actions()
    rng = np.random.default_rng(0)
    preds = rng.integers(0, 11, size=(6, len(acts)))
    for i in range(6):  # make some readings correct
        preds[i, : len(acts) // 2] = cv.labels[i][0]
    table = RewardTable(acts, cv.boxes, cv.labels, preds)
    canvas = torch.tensor([0, 1, 2, 3, 4, 5, 0, 1])
    sel = torch.tensor(np.stack([rng.choice(len(acts), 3, replace=False) for _ in range(8)]))
    parts = table.parts(canvas, sel)
    for n in range(8):
        c, a = int(canvas[n]), sel[n].numpy()
        assert parts["task"][n].item() == pytest.approx(task_reward(acts[a], preds[c, a], cv.boxes[c], cv.labels[c]))
        assert parts["heuristic"][n].item() == pytest.approx(heuristic_reward(acts[a], cv.boxes[c]))


def test_reading_by_side_counts_covered_digits_read_correctly_per_box_side():
    acts = np.array([[0, 0, 16, 16], [0, 0, 40, 40], [40, 40, 80, 80]])  # the last covers nothing
    gt, labels = [np.array([[2, 2, 10, 10]]), np.array([[4, 4, 12, 12], [60, 60, 68, 68]])], [np.array([3]),
                                                                                            np.array([5, 6])]
    preds = np.array([[3, 1, 3], [5, 5, 6]])  # canvas 0: the 40 box misreads; canvas 1: all read
    by = ex.reading_by_side(RewardTable(acts, gt, labels, preds))
    assert by.to_dict() == {16: 1.0, 40: pytest.approx(2 / 3)}  # 40: (0,'3') wrong, (1,'5') and (1,'6') right
    sides = ex.chosen_sides({("dual", 0): ex.SensingPolicy(), ("dual", 1): ex.SensingPolicy()},
                            torch.zeros(2, 24, 24), 2)
    assert sides.columns.tolist() == ["GRPO dual"] and sides["GRPO dual"].sum() == pytest.approx(1.0)


# --- data ---------------------------------------------------------------------------------


def test_canvases_hold_one_to_three_digits_inside_and_the_view_is_pooled():
    cv = make_canvases(30, 0)
    assert all(1 <= len(b) <= 3 for b in cv.boxes)
    assert all(((b >= 0) & (b <= 96)).all() for b in cv.boxes)
    v = global_view(cv.images)
    assert v.shape == (30, 24, 24)
    assert torch.allclose(v[0, 2, 3], cv.images[0, 8:12, 12:16].mean())
    with pytest.raises(ValueError, match="split"):
        make_canvases(2, 0, "val")
    with pytest.raises(ValueError, match="at least one"):
        make_canvases(0, 0)


def test_digits_are_pasted_at_their_native_8x8_and_shrink_to_2x2_in_the_global_view():
    from sklearn.datasets import load_digits

    from minirepro.papers.active_o3.canvas import DIGIT, VIEW, digit_images

    native = load_digits().images / 16.0
    imgs, labels = digit_images("test")
    assert DIGIT == 8 and imgs.shape[1:] == (8, 8)
    assert np.allclose(imgs, native[1::2], atol=1e-6) and (labels == load_digits().target[1::2]).all()
    cv = make_canvases(20, 5, "test")
    for i, (bxs, labs) in enumerate(zip(cv.boxes, cv.labels)):
        assert ((bxs[:, 2] - bxs[:, 0]) == DIGIT).all() and ((bxs[:, 3] - bxs[:, 1]) == DIGIT).all()
        for b, lab in zip(bxs, labs):  # each pasted patch is one of the held-out digits of its label, unscaled
            patch = cv.images[i, b[1]:b[3], b[0]:b[2]].numpy()
            assert np.abs(imgs[labels == lab] - patch).reshape(-1, 64).max(1).min() < 1e-6
    assert DIGIT * VIEW // 96 == 2  # a digit spans 2x2 pixels of the global view (3x3 when it straddles)


def test_distractors_are_no_larger_than_a_digit():
    from scipy.ndimage import label as components

    from minirepro.papers.active_o3.canvas import DIGIT

    cv = make_canvases(40, 7)
    img = cv.images.clone()
    for i, bxs in enumerate(cv.boxes):
        for b in bxs:
            img[i, b[1]:b[3], b[0]:b[2]] = 0
    for i in range(len(cv)):  # what is lit now are distractors (kept 2 px apart): each fits a digit's box
        comp, n = components(img[i].numpy() > 0, structure=np.ones((3, 3)))
        assert n >= 2
        for c in range(1, n + 1):
            yy, xx = np.nonzero(comp == c)
            assert np.ptp(yy) < DIGIT and np.ptp(xx) < DIGIT


def test_grid_actions_lie_inside_the_canvas_in_side_row_column_order():
    a = grid_actions()
    assert a.shape == (256, 4) and a.min() >= 0 and a[:, 2:].max() <= 96
    assert (a[:64, 2] - a[:64, 0] == 16).all() and (a[192:, 2] - a[192:, 0] == 72).all()
    assert len(tiling()) == 9


def test_gumbel_top_k_sampler_has_the_law_of_sequential_draws():
    logits = torch.tensor([[1.0, 0.0, -0.5, 0.7]])
    g = torch.Generator().manual_seed(0)
    acts, _ = sample_without_replacement(logits.expand(40_000, 4), 2, g)
    pairs = list(itertools.permutations(range(4), 2))
    exact = sequence_logprobs(logits.expand(len(pairs), 4), torch.tensor(pairs)).sum(1).exp()
    counts = {p: 0 for p in pairs}
    for a, b in acts.tolist():
        counts[(a, b)] += 1
    freq = torch.tensor([counts[p] / 40_000 for p in pairs])
    assert (freq - exact).abs().max().item() < 0.01  # about 4 standard errors at n = 40 000


def test_config_rejects_impossible_settings():
    with pytest.raises(ValueError, match="k_boxes"):
        ex.Config.preset("smoke", k_boxes=0)
    with pytest.raises(ValueError, match="group"):
        ex.Config.preset("smoke", group=1)


def test_the_committed_task_model_matches_its_manifest_quality():
    from minirepro.core import artifacts
    from minirepro.papers.active_o3.artifact import NAME, digit_test_crops
    from minirepro.papers.active_o3.loading import load_model
    from minirepro.papers.active_o3.taskmodel import predict

    model = load_model()
    crops, labels = digit_test_crops()
    acc = float((predict(model, crops, digits_only=True) == labels).float().mean())
    quality = artifacts.read_manifest(artifacts.artifacts_root() / NAME)["quality"]
    assert acc == pytest.approx(quality["held-out digit accuracy"], abs=2e-3)
    assert acc > 0.5  # far above chance (0.1): zoomed digits are readable
    read = ex.readability(model, make_canvases(60, ex.EVAL_SEED, "test"))  # the premise
    assert read["global view"] <= 0.2 and read["full resolution"] > 0.5


def test_held_out_streams_differ_from_the_training_stream_for_any_seed():
    for seed in (0, 1000, 4999, 5000, 900_000):
        ev, rd = ex.held_out_seed(seed), ex.held_out_seed(seed, 1)
        assert len({seed, ev, rd}) == 3 and ev == ex.held_out_seed(seed)  # distinct, reproducible
        a, b = make_canvases(4, seed, "train"), make_canvases(4, ev, "test")
        assert not torch.equal(a.images, b.images)
    cfg = ex.Config.preset("smoke", seed=ex.TASK_MODEL_SEED)
    with pytest.raises(ValueError, match="task model's own training canvases"):
        ex.make_data(cfg, torch.nn.Identity())


class _ReadsEveryOther(torch.nn.Module):
    """A stand-in task model whose argmax is the label of every other crop, by a lookup table."""

    def __init__(self, labels):
        super().__init__()
        self.labels = labels

    def forward(self, crops):
        out = torch.zeros(len(crops), 11)
        wrong = (self.labels[: len(crops)] + 1) % 10
        truth = torch.where(torch.arange(len(crops)) % 2 == 0, self.labels[: len(crops)], wrong)
        out[torch.arange(len(crops)), truth] = 1.0
        return out


def test_digit_reads_are_per_digit_and_their_means_are_the_readability():
    cv = ex.read_canvases(3, 50)
    assert cv.n_digits >= 50
    _, _, labels = ex.tight_boxes(cv)
    model = _ReadsEveryOther(labels)
    reads = ex.digit_reads(model, cv, 50)
    for name in ("global view", "full resolution"):
        np.testing.assert_array_equal(reads[name], (np.arange(50) % 2 == 0).astype(float))
    assert ex.readability(model, cv) == {k: pytest.approx(float(np.mean(np.arange(cv.n_digits) % 2 == 0)))
                                         for k in ("global view", "full resolution")}
    with pytest.raises(ValueError, match="digits asked"):
        ex.digit_reads(model, cv, cv.n_digits + 1)
    with pytest.raises(ValueError, match="n_digits"):
        ex.read_canvases(0, 0)


def test_curve_deviation_is_each_seeds_distance_from_the_mean_curve():
    rows = []
    for seed, level in ((0, 0.2), (1, 0.4), (2, 0.9)):
        for it in range(12):
            rows += [{"form": "dual", "seed": seed, "iter": it, "task": level},
                     {"form": "task", "seed": seed, "iter": it, "task": 0.5}]
    import pandas as pd

    curves = pd.DataFrame(rows)
    np.testing.assert_allclose(ex.curve_deviation(curves, "dual"), [0.3, 0.1, 0.4])  # |level - 0.5|
    np.testing.assert_allclose(ex.curve_deviation(curves, "task"), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="at least 2 seeds"):
        ex.curve_deviation(curves[curves.seed == 0], "dual")
