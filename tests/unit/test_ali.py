"""ALI: renderer, metrics, codes and stages against independent references.

References: closed-form Blinn-Phong shading of planes and paraboloids, scikit-image's
SSIM and PSNR, numpy's slogdet for the coding rate, and structural invariants of the
relighter (the reference enters only through its light code; fusion starts at LI;
each stage moves only its own parameters).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from minirepro.papers import ali

# ------------------------------------------------------------------ rendering


def closed_form(n, albedo, material, light, ambient=ali.AMBIENT):
    """Blinn-Phong for one pixel, written out by hand from the textbook formula."""
    kd, ks, p, metal = ali.MATERIAL_PARAMS[material]
    l_dir, c = np.array(light.direction), np.array(light.rgb)
    h = (l_dir + [0, 0, 1]) / np.linalg.norm(l_dir + [0, 0, 1])
    ndl = float(n @ l_dir)
    spec = ks * max(0.0, float(n @ h)) ** p * (albedo if metal else 1.0) if ndl > 0 else 0.0
    return np.clip(c * albedo * (ambient + kd * max(0.0, ndl)) + c * spec, 0, 1)


LIGHTS = [ali.Light((0.0, 0.0, 1.0), (1.0, 1.0, 1.0)),
          ali.Light((0.6, 0.0, 0.8), (1.0, 0.5, 0.25)),
          ali.Light((-0.36, 0.48, 0.8), (0.3, 0.9, 0.6))]


@pytest.mark.parametrize("material", ali.MATERIALS)
@pytest.mark.parametrize("light", LIGHTS)
@pytest.mark.parametrize("slope", [(0.0, 0.0), (0.4, -0.2), (-1.0, 0.7)])
def test_shading_of_a_tilted_plane_matches_the_closed_form(material, light, slope):
    a, b = slope
    yy, xx = np.mgrid[0:9, 0:9].astype(float)
    normals = ali.heightfield_normals(a * xx + b * yy)
    n_true = np.array([-a, -b, 1.0]) / np.sqrt(1 + a * a + b * b)
    np.testing.assert_allclose(normals, np.broadcast_to(n_true, normals.shape), atol=1e-12)
    albedo = np.full((9, 9, 3), [0.7, 0.4, 0.2])
    mat = np.full((9, 9), ali.material_index(material))
    img = ali.shade(normals, albedo, mat, light)
    expect = closed_form(n_true, np.array([0.7, 0.4, 0.2]), material, light)
    np.testing.assert_allclose(img[:, 4, 4], expect, atol=1e-6)
    assert img.shape == (3, 9, 9) and img.dtype == np.float32


def test_paraboloid_normals_are_exact_inside_and_highlight_peaks_at_the_half_vector():
    yy, xx = np.mgrid[0:15, 0:15].astype(float)
    h = -0.05 * ((xx - 7) ** 2 + (yy - 7) ** 2)  # a dome
    n = ali.heightfield_normals(h)
    for r, c in [(7, 7), (3, 10), (11, 5)]:
        grad = np.array([-0.1 * (c - 7), -0.1 * (r - 7)])
        want = np.array([-grad[0], -grad[1], 1.0]) / np.sqrt(1 + grad @ grad)
        np.testing.assert_allclose(n[r, c], want, atol=1e-12)
    # a metal dome lit from the camera: the brightest pixel is the apex (n = h = v)
    img = ali.shade(n, np.full((15, 15, 3), 0.5), np.full((15, 15), 2), LIGHTS[0])
    assert np.unravel_index(img.sum(0).argmax(), (15, 15)) == (7, 7)


def test_make_scenes_holds_every_material_and_the_shifted_domain_is_noisy():
    s = ali.make_scenes(6, 3, 16, seed=1)
    assert s.images.shape == (6, 3, 3, 16, 16) and s.material.shape == (6, 16, 16)
    assert all(set(np.unique(m)) == {0, 1, 2} for m in s.material)
    assert np.array_equal(s.images, s.clean)
    sh = ali.make_scenes(6, 3, 16, "shifted", seed=1, noise=0.05)
    resid = sh.images - sh.clean
    assert 0.02 < resid.std() < 0.06 and sh.images.min() >= 0 and sh.images.max() <= 1
    shared = ali.make_scenes(4, 3, 16, seed=2, shared_lights=True)
    assert all(ls == shared.lights[0] for ls in shared.lights)


# ------------------------------------------------------------------ metrics


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.integers(7, 20), noise=st.floats(0.01, 0.5))
def test_ssim_and_psnr_match_scikit_image(seed, size, noise):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (2, 3, size, size)).astype(np.float32)
    y = np.clip(x + rng.normal(0, noise, x.shape), 0, 1).astype(np.float32)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    for i in range(2):
        ref = structural_similarity(y[i], x[i], channel_axis=0, data_range=1.0)
        assert ali.ssim(ty, tx)[i].item() == pytest.approx(ref, abs=1e-5)
        assert ali.psnr(ty, tx)[i].item() == pytest.approx(
            peak_signal_noise_ratio(x[i], y[i], data_range=1.0), abs=1e-3)


def test_region_metrics_on_the_whole_image_equal_the_image_metrics_and_regions_split_errors():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.uniform(0, 1, (2, 3, 12, 12)).astype(np.float32))
    y = (x + 0.1 * torch.from_numpy(rng.normal(size=x.shape).astype(np.float32))).clamp(0, 1)
    full = ali.region_metrics(y, x, torch.ones(2, 12, 12, dtype=torch.bool))
    torch.testing.assert_close(full["psnr"], ali.psnr(y, x), atol=1e-4, rtol=0)
    torch.testing.assert_close(full["ssim"], ali.ssim(y, x), atol=1e-5, rtol=0)
    left = torch.zeros(2, 12, 12, dtype=torch.bool)
    left[:, :, :6] = True
    y2 = x.clone()
    y2[:, :, :, 6:] = 0.0  # errors only on the right
    assert torch.all(ali.region_metrics(y2, x, left)["rmse"] == 0)
    assert torch.all(ali.region_metrics(y2, x, ~left)["rmse"] > 0)


# ------------------------------------------------------------------ codes and model


def test_coding_rate_matches_numpy_slogdet():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(50, 6))
    lam = 0.7
    want = np.linalg.slogdet(np.eye(6) + 6 / (50 * lam * lam) * a.T @ a)[1]
    assert ali.coding_rate(torch.from_numpy(a), lam).item() == pytest.approx(want, rel=1e-10)
    # collapsed codes (all rows equal) have a lower rate than spread ones
    same = torch.ones(50, 6) / np.sqrt(6)
    assert ali.coding_rate(same).item() < ali.coding_rate(torch.nn.functional.normalize(torch.from_numpy(a), dim=1)).item()


def _images(n=3, size=12, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).uniform(0, 1, (n, 3, size, size)).astype(np.float32))


def test_no_leak_the_reference_enters_only_through_its_light_code():
    torch.manual_seed(0)
    model = ali.Relighter()
    content, ref1, ref2 = _images(seed=1), _images(seed=2), _images(seed=3)
    a, _ = model.codes(content)
    _, l1 = model.codes(ref1)
    torch.testing.assert_close(model.relight(content, ref1), model.decoder(a, l1))
    head = model.encoder.light[-1]
    with torch.no_grad():  # hold the extrinsic code: any reference gives the same output
        head.weight.zero_()
        head.bias.copy_(torch.linspace(-1, 1, head.bias.numel()))
    torch.testing.assert_close(model.relight(content, ref1), model.relight(content, ref2))
    held = model.relight(content, ref1)
    with torch.no_grad():  # swap the extrinsic code: the output changes
        head.bias.copy_(torch.linspace(1, -1, head.bias.numel()))
    assert (model.relight(content, ref1) - held).abs().max() > 1e-3


def test_fusion_starts_at_li_and_stages_move_only_their_parameters():
    torch.manual_seed(0)
    model = ali.Relighter()
    x = _images(4, 16)
    before = model.codes(x)[0].clone()
    model.attach_prior(ali.PriorEncoder())
    torch.testing.assert_close(model.codes(x)[0], before)  # Proj = 0: A = S
    data = torch.from_numpy(ali.make_scenes(4, 2, 16, seed=0).images)
    for stage, moving in (("I", {"encoder", "proj"}), ("II", {"decoder"})):
        snap = {k: v.clone() for k, v in model.state_dict().items()}
        ali.train_stage(model, stage, data, 3, batch_scenes=2, lr=1e-2)
        changed = {k.split(".")[0] for k, v in model.state_dict().items() if not torch.equal(v, snap[k])}
        assert changed == moving, (stage, changed)


# ------------------------------------------------------------------ bad input


def test_bad_input_gives_clear_errors():
    with pytest.raises(ValueError, match="unknown material 'glass'"):
        ali.material_index("glass")
    with pytest.raises(ValueError, match="material indices"):
        ali.shade(np.tile([0, 0, 1.0], (4, 4, 1)), np.ones((4, 4, 3)), np.full((4, 4), 3), LIGHTS[0])
    with pytest.raises(ValueError, match="unit 3-vector"):
        ali.shade(np.tile([0, 0, 1.0], (4, 4, 1)), np.ones((4, 4, 3)), np.zeros((4, 4), int),
                  ali.Light((0.0, 0.0, 2.0), (1, 1, 1)))
    with pytest.raises(ValueError, match="unknown shape"):
        ali.random_height(np.random.default_rng(0), 16, "torus")
    with pytest.raises(ValueError, match="unknown domain"):
        ali.make_scenes(2, 2, 16, "cartoon")
    model, x = ali.Relighter(), _images()
    with pytest.raises(ValueError, match=r"RGB batch \(N, 3, H, W\)"):
        model.relight(x[:, :2], x[:, :2])
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        model.relight(x * 255, x)
    with pytest.raises(ValueError, match="NaN"):
        ali.psnr(x * float("nan"), x)
    with pytest.raises(ValueError, match="differ in shape"):
        ali.ssim(x, x[:2])
    with pytest.raises(ValueError, match="at least 7x7"):
        ali.ssim(x[..., :5, :5], x[..., :5, :5])
    with pytest.raises(ValueError, match="Stage III needs"):
        ali.train_stage(model, "III", torch.rand(2, 2, 3, 12, 12), 1)
    with pytest.raises(ValueError, match="unknown stage"):
        ali.set_trainable(model, "IV")
    with pytest.raises(ValueError, match="unknown prior"):
        ali.train_prior("clip", x, torch.zeros(3, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="at least two lights"):
        ali.li_loss(model, x[:, None], torch.Generator())


def test_patch_mask_and_augmentation_stay_in_range():
    g = torch.Generator().manual_seed(0)
    m = ali.patch_mask(64, 16, 4, 0.6, g)
    assert set(torch.unique(m).tolist()) <= {0.0, 1.0} and 0.5 < m.mean().item() < 0.7
    blocks = m[:, 0].unfold(1, 4, 4).unfold(2, 4, 4)  # every 4x4 block is all 0 or all 1
    assert torch.all(blocks.amin((-1, -2)) == blocks.amax((-1, -2)))
    aug = ali.photometric_augment(_images(8, 12), g)
    assert aug.min() >= 0 and aug.max() <= 1
    with pytest.raises(ValueError, match="multiple of the patch"):
        ali.patch_mask(2, 10, 4)


def test_material_table_pairs_seeds_and_reports_every_metric():
    import pandas as pd

    rows = []
    for seed, shift in ((0, 0.0), (1, 1.0)):
        for i, reg in enumerate(ali.MATERIALS):
            for method, gain in (("LI", 0.0), ("ALI (dense)", 0.5 * (i + 1))):
                rows.append({"method": method, "stage": "II", "domain": "synthetic", "region": reg,
                             "seed": seed, "psnr": 10 + shift + gain, "rmse": 0.2 - 0.01 * gain,
                             "ssim": 0.5 + 0.1 * gain})
    t = ali.material_table(pd.DataFrame(rows))
    assert list(t.index) == list(ali.MATERIALS)
    assert set(t.columns.get_level_values("metric")) == {"rmse", "psnr", "ssim"}
    gain = t[("psnr", "ALI (dense) - LI")].to_numpy()
    np.testing.assert_allclose(gain, [0.5, 1.0, 1.5])
    np.testing.assert_allclose(t[("psnr", "LI")].to_numpy(), [10.5] * 3)  # mean over the two seeds
    np.testing.assert_allclose(t[("rmse", "ALI (dense) - LI")].to_numpy(), [-0.005, -0.01, -0.015])
    with pytest.raises(KeyError, match="no rows"):
        ali.material_table(pd.DataFrame(rows), stage="I")


# ------------------------------------------------------------------ test sets (one per model seed)


def _find(stack: np.ndarray, img: np.ndarray) -> list[tuple[int, int]]:
    """Every (scene, light) of ``stack`` (S, M, 3, H, W) whose image equals ``img`` exactly."""
    hit = np.all(stack == img[None, None], axis=(2, 3, 4))
    return [tuple(int(v) for v in ij) for ij in np.argwhere(hit)]


def test_cross_scene_triplets_pair_another_scene_under_another_light_with_the_right_target():
    scenes = ali.make_scenes(6, 5, 16, "synthetic", seed=3, shared_lights=True)
    p = ali.cross_scene_pairs(scenes, 40, seed=1)
    assert p.content.shape == (40, 3, 16, 16) and p.material.shape == (40, 16, 16)
    for i in range(40):  # recover each triplet's scenes and lights by search (a brute-force reference)
        (s, a), = _find(scenes.images, p.content[i].numpy())
        (s2, b), = _find(scenes.images, p.reference[i].numpy())
        assert s2 != s and b != a
        np.testing.assert_array_equal(p.target[i].numpy(), scenes.clean[s, b])
        np.testing.assert_array_equal(p.material[i].numpy(), scenes.material[s])
    # many draws cover many ordered light pairs, not the handful of a 4-light set
    q = ali.cross_scene_pairs(scenes, 400, seed=2)
    pairs = {(_find(scenes.images, q.content[i].numpy())[0][1], _find(scenes.images, q.reference[i].numpy())[0][1])
             for i in range(400)}
    assert len(pairs) == 5 * 4
    with pytest.raises(ValueError, match="n_triplets"):
        ali.cross_scene_pairs(scenes, 0)


def test_every_model_seed_gets_its_own_test_set_and_the_draw_is_reproducible():
    cfg = ali.Config.preset("smoke", n_test=6, n_test_lights=4, n_triplets=10, n_train=4, n_shifted=4)
    a0, a0_again, a1 = ali.make_test_set(cfg, 0, 0), ali.make_test_set(cfg, 0, 0), ali.make_test_set(cfg, 0, 1)
    b0 = ali.make_test_set(cfg, 7, 0)
    for dom in ali.DOMAINS:
        np.testing.assert_array_equal(a0.scenes[dom].images, a0_again.scenes[dom].images)
        np.testing.assert_array_equal(a0.pairs[dom].content.numpy(), a0_again.pairs[dom].content.numpy())
        assert not np.allclose(a0.scenes[dom].images, a1.scenes[dom].images)  # another model seed
        assert not np.allclose(a0.scenes[dom].images, b0.scenes[dom].images)  # another data seed
        assert a0.scenes[dom].images.shape[:2] == (6, 4) and len(a0.pairs[dom].content) == 10
    assert a0.probe.images.shape[:2] == (cfg.n_probe, 1)
    assert not np.allclose(a0.probe.images[:6, 0], a0.scenes["synthetic"].images[:, 0])  # scenes of its own
    assert a0.scenes["synthetic"].lights[0] != a1.scenes["synthetic"].lights[0]  # lights drawn per seed too
    data = ali.make_data(cfg, 0, [0, 1])
    assert sorted(data.tests) == [0, 1]
    np.testing.assert_array_equal(data.tests[1].scenes["shifted"].images, a1.scenes["shifted"].images)
    with pytest.raises(ValueError, match="3 shared lights"):
        ali.make_test_set(ali.Config.preset("smoke", n_test_lights=2), 0, 0)


def test_training_scenes_do_not_depend_on_the_evaluation_settings():
    small = ali.Config.preset("smoke", n_train=5, n_shifted=3, n_test=4)
    other = ali.Config.preset("smoke", n_train=5, n_shifted=3, n_test=9, n_test_lights=12, n_triplets=3)
    (t1, s1), (t2, s2) = ali.training_scenes(small, 4), ali.training_scenes(other, 4)
    np.testing.assert_array_equal(t1.images, t2.images)
    np.testing.assert_array_equal(s1.images, s2.images)
    assert t1.images.shape[:2] == (5, small.n_lights) and s1.images.shape[:2] == (3, 1)


class _Oracle(torch.nn.Module):
    """A relighter that returns the reference unchanged: its output follows the reference's light and
    scene, never the content (light swap > 0, scene swap 0, leak 0)."""

    def relight(self, content, reference):
        return reference


def test_swap_ratios_of_known_relighters():
    scenes = ali.make_scenes(8, 4, 16, "synthetic", seed=5, shared_lights=True)
    r = ali.swap_effects(_Oracle(), scenes, seed=0)
    assert r["scene swap"] == 0.0 and r["leak"] == 0.0 and r["light swap"] > 0.3

    class Copy(torch.nn.Module):  # copies the content: all of the content's light leaks, no light swap
        def relight(self, content, reference):
            return content

    c = ali.swap_effects(Copy(), scenes, seed=0)
    assert c["light swap"] == 0.0 and c["leak"] == pytest.approx(1.0, abs=0.1)
    with pytest.raises(ValueError, match="3 shared lights"):
        ali.swap_effects(Copy(), ali.make_scenes(4, 2, 16, shared_lights=True))


def test_the_artifact_spec_holds_only_training_settings():
    from minirepro.papers.ali import artifact

    spec = artifact.ArtifactSpec()
    assert set(spec.training) == set(artifact.TRAINING_FIELDS)
    assert not {"n_test", "n_test_lights", "n_triplets", "data_seed", "n_seeds", "seed"} & set(spec.training)
    book = ali.Config.preset("book")
    assert all(getattr(spec.config, k) == getattr(book, k) for k in artifact.TRAINING_FIELDS)


def test_evaluate_shares_one_ssim_map_and_agrees_with_each_region_on_its_own():
    scenes = ali.make_scenes(5, 3, 16, "shifted", seed=2, shared_lights=True)
    p = ali.cross_scene_pairs(scenes, 12, seed=0)
    rows = {r["region"]: r for r in ali.evaluate(p.content, p)}
    masks = {"all": torch.ones_like(p.material, dtype=torch.bool)}
    masks |= {name: p.material == i for i, name in enumerate(ali.MATERIALS)}
    for region, mask in masks.items():
        alone = ali.region_metrics(p.content.clamp(0, 1), p.target, mask)  # its own SSIM map
        for k in ("rmse", "psnr", "ssim"):
            assert rows[region][k] == pytest.approx(float(np.nanmean(alone[k].numpy())), rel=1e-6)
    whole = structural_similarity(p.content[0].numpy(), p.target[0].numpy(), channel_axis=0, data_range=1)
    assert float(ali.region_metrics(p.content[:1], p.target[:1], masks["all"][:1])["ssim"][0]) == pytest.approx(
        whole, abs=1e-5)
